"""Metering: who made each LLM call, what it cost in tokens, and whether their budget allows the next one.

A door says who is calling with a `Caller` (passed to `run_agent`/`metered`, or set for the task with `calling`).
Every provider called for it is wrapped in a `MeteredProvider`, which refuses a model the caller may not use
(AppError 403 `model_not_allowed`, agentsite.agent.modelaccess), then asks the registered `Metering` to `admit`
the call's worst case before the upstream is contacted (AppError 429 `budget_exceeded` | `rate_limited`), takes
the tokens from the upstream's Usage event or estimates them from the text, and hands one `CallRecord` to
`Metering.record` however the call ended. `metered_call` admits and records a call whose cost is known up front
(hosted speech, which no model policy names).

The runtime imports no facet app: `usage` registers the one Metering with `set_metering()` in its ready().
Without one and without a model policy (runtime tests) `metered()` returns the provider unchanged.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from contextlib import aclosing, asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from agentsite.agent import modelaccess
from agentsite.agent.providers.base import Provider, flatten
from agentsite.agent.types import ChatRequest, Completion, StreamEvent, TextDelta, ToolCallEvent, Usage

logger = logging.getLogger(__name__)

CHARS_PER_TOKEN = 4
# What an image in a prompt is taken to cost before a call (Anthropic's most for one image).
IMAGE_TOKENS = 1600
T = TypeVar("T")


@dataclass(frozen=True)
class Caller:
    """Who an LLM call is made for. `user_id` None: an anonymous caller (a public /v1); `key_id` the API key's id
    ("" without a key) and `key_budget` that key's own budget (None: none); `facet` the door: chat | v1 |
    workflow | scheduler | mcp | agent. `admin` False: the caller acts without admin rights even when its user
    has them (an API key without the `admin` scope), so what runs for it (a workflow's tools) never gets them;
    None: the user's own rights."""

    user_id: int | None
    key_id: str = ""
    facet: str = "agent"
    key_budget: dict[str, Any] | None = field(default=None, compare=False)
    admin: bool | None = field(default=None, compare=False)
    agent: str = field(default="", compare=False)  # the named agent the call is made for (its slug; "" none)

    @classmethod
    def with_key(cls, user_id: int | None, key: Any, facet: str) -> Caller:
        """The caller of a request authenticated with `key` (an API key record: `pk`, `budget`, `scopes`; None:
        no key)."""
        if key is None:
            return cls(user_id, facet=facet)
        admin = None if "admin" in (getattr(key, "scopes", None) or ()) else False
        return cls(user_id, str(key.pk), facet, getattr(key, "budget", None) or None, admin)


@dataclass
class CallRecord:
    """One LLM call as it ended. `status`: ok | error | interrupted (closed or cancelled before the end);
    `counted`: the tokens are the upstream's own figures (False: estimated from the text)."""

    caller: Caller
    model_requested: str
    model_answered: str
    prompt_tokens: int
    completion_tokens: int
    latency_ms: float
    status: str
    counted: bool
    error: str = ""


class Metering(Protocol):
    async def check(self, caller: Caller) -> None:
        """Raise AppError 429 when the caller may not start a call now (reserves nothing)."""

    async def admit(self, caller: Caller, model: str, *, prompt_tokens: int = 0,
                    max_tokens: int | None = None) -> object | None:
        """Reserve a call for `caller` of at most `prompt_tokens` + `max_tokens` (None: the default cap) or raise
        AppError 429; returns a ticket for `record` (None: no budget)."""

    def record(self, record: CallRecord, ticket: object | None) -> Awaitable[None] | None:
        """Buffer the call (no I/O); with a ticket, return what settles it against the budgets."""


_metering: Metering | None = None
_caller: ContextVar[Caller | None] = ContextVar("agentsite_caller", default=None)


def set_metering(metering: Metering | None) -> None:
    global _metering
    _metering = metering


def get_metering() -> Metering | None:
    return _metering


def current_caller() -> Caller | None:
    return _caller.get()


@contextmanager
def calling(caller: Caller) -> Iterator[None]:
    """Make `caller` the caller of every LLM call in this block (and in tasks it starts)."""
    token = _caller.set(caller)
    try:
        yield
    finally:
        _caller.reset(token)


def caller_for(user_id: int | None, facet: str = "agent") -> Caller:
    """The task's caller when it is this user (a key set at the door is kept), else a new one for `facet`."""
    current = _caller.get()
    if current is not None and current.user_id == user_id:
        return current
    return Caller(user_id, facet=facet)


async def check(caller: Caller) -> None:
    """A door's early check (before a stream starts): raises AppError 429 when the caller's budget is spent."""
    if _metering is not None:
        await _metering.check(caller)


def metered(provider: Provider, caller: Caller | None = None) -> Provider:
    """`provider` with every call admitted and recorded for `caller` (default: the task's caller, else anonymous):
    its model allowed to the caller (agentsite.agent.modelaccess), then its budget."""
    if _metering is None and not modelaccess.active() or isinstance(provider, MeteredProvider):
        return provider
    return MeteredProvider(provider, caller or _caller.get() or Caller(None))


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN) if text else 0


def prompt_estimate(request: ChatRequest) -> int:
    """The prompt's tokens before a call: its characters over CHARS_PER_TOKEN, plus IMAGE_TOKENS an image."""
    images = sum(len(message.images) for message in request.messages)
    return prompt_text_tokens(request) + images * IMAGE_TOKENS


def prompt_text_tokens(request: ChatRequest) -> int:
    """The prompt's text (messages, tool calls, tool definitions) in tokens: its characters over
    CHARS_PER_TOKEN."""
    return math.ceil(prompt_chars(request) / CHARS_PER_TOKEN)


def prompt_chars(request: ChatRequest) -> int:
    chars = 0
    for message in request.messages:
        chars += len(message.text) + sum(len(json.dumps(call.arguments)) for call in message.tool_calls)
    return chars + sum(len(spec.description) + len(json.dumps(spec.input_schema)) for spec in request.tools)


class _Watch:
    """What one call has streamed: the upstream's usage when it sent one, else the characters to estimate from."""

    def __init__(self, provider: MeteredProvider, request: ChatRequest):
        self.provider = provider
        self.request = request
        self.started = time.perf_counter()
        self.usage: Usage | None = None
        self.chars = 0
        self.answered = ""

    def see(self, event: StreamEvent) -> None:
        if isinstance(event, TextDelta):
            self.chars += len(event.text)
        elif isinstance(event, ToolCallEvent):
            self.chars += len(event.call.name) + len(json.dumps(event.call.arguments))
        elif isinstance(event, Usage):
            self.usage = event

    def record(self, status: str, error: str = "", refused: bool = False) -> CallRecord:
        usage = self.usage
        # The router's estimate (Usage.estimated) is recorded as it is, so the reply and the meter agree.
        counted = usage is not None and usage.total_tokens > 0 and not usage.estimated
        if refused:  # the upstream refused the request (a 4xx): nothing was processed, nothing is charged
            usage, counted = Usage(), True
        elif usage is None or usage.total_tokens == 0:
            usage = Usage(prompt_text_tokens(self.request), math.ceil(self.chars / CHARS_PER_TOKEN))
        inner = self.provider.inner
        # Through the router (agentsite.agent.routing): the name the caller asked for, and the catalogue entry
        # that answered it (after a fallback, another than the first).
        route = getattr(inner, "route", None)
        model = self.provider.model_for(self.request) or (route.name if route is not None else "")
        attempts = getattr(inner, "attempts", None)
        answered = self.answered or (attempts.answered if attempts is not None else None) or model
        return CallRecord(self.provider.caller, model, answered, usage.prompt_tokens, usage.completion_tokens,
                          (time.perf_counter() - self.started) * 1000, status, counted, error)


class MeteredProvider(Provider):
    """A provider whose every call is allowed by the model policy and admitted by the Metering first, and
    recorded however it ends."""

    name = "metered"
    default_model = ""

    def __init__(self, inner: Provider, caller: Caller):  # noqa: D107 - no super(): every attribute is the inner's
        self.inner = inner
        self.caller = caller
        self.base_url, self.model, self.timeout = inner.base_url, inner.model, inner.timeout

    def model_for(self, request: ChatRequest) -> str:
        return self.inner.model_for(request)

    def stream(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        return flatten(self.stream_batches(request))

    async def allow(self, request: ChatRequest) -> None:
        """AppError 403 `model_not_allowed` when the caller may not use the model this call goes to: the route
        the router was given (an alias by its name), else the provider's model."""
        route = getattr(self.inner, "route", None)
        if route is not None:
            await modelaccess.require_route(self.caller, route)
        else:
            await modelaccess.require(self.caller, (self.model_for(request),))

    async def stream_batches(self, request: ChatRequest) -> AsyncGenerator[list[StreamEvent], None]:
        await self.allow(request)
        watch = _Watch(self, request)
        async with _admitted(self.caller, self.model_for(request), prompt_estimate(request),
                             request.settings.max_tokens, watch.record):
            async with aclosing(self.inner.stream_batches(request)) as batches:
                async for batch in batches:
                    for event in batch:
                        watch.see(event)
                    yield batch

    async def complete(self, request: ChatRequest) -> Completion:
        await self.allow(request)
        watch = _Watch(self, request)
        async with _admitted(self.caller, self.model_for(request), prompt_estimate(request),
                             request.settings.max_tokens, watch.record):
            completion = await self.inner.complete(request)
            watch.usage = completion.usage
            watch.chars = len(completion.text)
            return completion

    def __repr__(self) -> str:
        return f"MeteredProvider({self.inner!r}, {self.caller!r})"


async def metered_call(caller: Caller, model: str, tokens: int, call: Callable[[], Awaitable[T]]) -> T:
    """`await call()` for `caller`, admitted first for `tokens` (AppError 429 when a budget has no room for
    them) and recorded however it ends: `tokens` prompt tokens, or none when it failed (the upstream refused
    it or could not be reached). For a call whose whole cost is known before it is made (hosted speech)."""
    if _metering is None:
        return await call()
    started = time.perf_counter()

    def record(status: str, error: str, refused: bool) -> CallRecord:
        return CallRecord(caller, model, model, 0 if status == "error" else tokens, 0,
                          (time.perf_counter() - started) * 1000, status, True, error)

    async with _admitted(caller, model, tokens, 0, record):
        return await call()


@asynccontextmanager
async def _admitted(caller: Caller, model: str, prompt_tokens: int, max_tokens: int | None,
                    record: Callable[[str, str, bool], CallRecord]) -> AsyncIterator[None]:
    """The frame of every metered call: admitted first (AppError 429 when a budget has no room), then recorded
    however it ends (`record(status, error, refused)`: `ok`, `error`, or `interrupted` for a call closed or
    cancelled midway, which settles in the background)."""
    metering = _metering
    if metering is None:  # no metering registered, only a model policy (MeteredProvider.allow)
        yield
        return
    ticket = await metering.admit(caller, model, prompt_tokens=prompt_tokens, max_tokens=max_tokens)
    status, error, refused = "interrupted", "", False
    try:
        yield
        status = "ok"
    except Exception as exc:
        status, error, refused = "error", str(getattr(exc, "message", "")) or type(exc).__name__, _refused(exc)
        raise
    finally:
        await _settle(metering.record(record(status, error, refused), ticket), wait=status != "interrupted")


def _refused(exc: BaseException) -> bool:
    """Whether the upstream refused the request with a 4xx (UpstreamError.upstream_status): it processed no
    prompt, so the call costs no tokens."""
    status = getattr(exc, "upstream_status", None)
    return isinstance(status, int) and 400 <= status < 500


_background: set[asyncio.Task[None]] = set()


async def _settle(settling: Awaitable[None] | None, *, wait: bool) -> None:
    """Await the settlement; a closed or cancelled call (which must not wait) settles in the background."""
    if settling is None:
        return
    if wait:
        try:
            await settling
        except Exception:  # a boundary: a budget store that failed must not fail the answer already given
            logger.exception("Settling a call against its budgets failed")
        return
    task = asyncio.ensure_future(settling)
    _background.add(task)
    task.add_done_callback(_background.discard)


__all__ = ["CHARS_PER_TOKEN", "IMAGE_TOKENS", "CallRecord", "Caller", "MeteredProvider", "Metering", "caller_for",
           "calling", "check", "current_caller", "estimate_tokens", "get_metering", "metered", "metered_call",
           "prompt_estimate", "prompt_text_tokens", "set_metering"]

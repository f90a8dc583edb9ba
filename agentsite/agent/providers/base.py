"""The one small base class every LLM provider implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import ClassVar

from agentsite.agent.providers.urls import basic_auth, mask_url, url_secrets
from agentsite.agent.types import ChatRequest, Completion, Finish, StreamEvent, TextDelta, ToolCallEvent, Usage


class Provider(ABC):
    """Turns a provider-neutral ChatRequest into a wire request and streams back provider-neutral events.

    `stream()` yields TextDelta and ToolCallEvent (each call complete, its arguments assembled) in the
    order the model produced them, then at most one Usage, then exactly one Finish. `complete()` answers
    the same request without streaming. Both raise `UpstreamError` (an `AppError("upstream_error")`, a 502, or
    the upstream's own 4xx when it refused the request as the caller's fault: http.caller_status) for every
    upstream failure (connection refused, timeout, an HTTP error status, a malformed reply); its message is
    the provider's and never contains the API key. Its `upstream_status` is the
    upstream's HTTP status (None when none came: refused, timeout, malformed) and `retryable` says whether
    another upstream may be tried instead: True for no status, a 5xx or a 429, False for any other 4xx (the
    request or the key is wrong, and would be wrong elsewhere too). The router (agentsite.agent.routing)
    relies on these two. Cancelling the task that iterates `stream()` closes the upstream request at once.

    `headers` are extra HTTP headers sent with every request (a connection's own: an API gateway's key).

    `base_url` may hold credentials (agentsite.agent.providers.urls): endpoints are joined onto its path with
    its query kept after them, and a `user:password@` goes as `Authorization: Basic` unless the provider's own
    key takes that header (OpenAI's Bearer key does: the key wins; Anthropic's `x-api-key` does not). The
    connection's `headers` override both. Its credentials are scrubbed out of every error like the key.
    """

    name: ClassVar[str]
    label: ClassVar[str]  # how a form names it (GET /api/meta)
    default_model: ClassVar[str]
    default_base_url: ClassVar[str] = ""
    # Whether a connection to it needs an API key and a base URL (what its form asks for).
    needs_key: ClassVar[bool] = True
    needs_url: ClassVar[bool] = True
    # The ChatRequest.extra fields this wire format carries (passes on or translates); None: every field.
    carries: ClassVar[frozenset[str] | None] = frozenset()

    @classmethod
    def carries_response_format(cls, request: ChatRequest | None = None) -> bool:
        """Whether this wire format carries `ChatRequest.response_format` (for this request)."""
        return False

    def __init__(self, *, base_url: str = "", api_key: str = "", model: str = "", timeout: float = 120.0,
                 headers: dict[str, str] | None = None):
        self.base_url = (base_url or self.default_base_url).rstrip("/")
        self._api_key = api_key
        self._headers = dict(headers or {})
        self.model = model or self.default_model
        self.timeout = timeout

    def auth_headers(self) -> dict[str, str]:
        """`Authorization: Basic` for a base URL's userinfo (empty without one); a provider adds its key after."""
        basic = basic_auth(self.base_url)
        return {"Authorization": basic} if basic else {}

    def secrets(self) -> tuple[str, ...]:
        """What no message may show: the base URL's credentials and the extra headers' values (and the key,
        which Upstream scrubs on its own)."""
        return (*url_secrets(self.base_url), *self._headers.values())

    def model_for(self, request: ChatRequest) -> str:
        return request.settings.model or self.model

    @abstractmethod
    def stream(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        """An async generator of stream events (see the class docstring)."""

    def stream_batches(self, request: ChatRequest) -> AsyncGenerator[list[StreamEvent], None]:
        """stream()'s events in lists, in the same order: each list holds events that were ready together (a
        network read's worth), so writing a list out as it comes delays no event. Only the first list may be
        empty: it then says the upstream has answered (a success status) and no event is ready yet, so a door
        can start its reply while the model thinks. A failure raised after it is still one before the first
        event (the router may try another target). A provider whose upstream delivers several events per read
        overrides this (and builds stream() on it); the default gives one event per list."""
        return one_per_list(self.stream(request))

    async def complete(self, request: ChatRequest) -> Completion:
        return await collect(self.stream(request))

    async def list_models(self) -> list[str]:
        """The model names the upstream offers (discovery); raises UpstreamError like stream()."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={mask_url(self.base_url)!r}, model={self.model!r})"


async def one_per_list(events: AsyncGenerator[StreamEvent, None]) -> AsyncGenerator[list[StreamEvent], None]:
    async with aclosing(events):
        async for event in events:
            yield [event]


async def flatten(batches: AsyncGenerator[list[StreamEvent], None]) -> AsyncGenerator[StreamEvent, None]:
    """A stream_batches() iterator's events one by one (closing it when left early)."""
    async with aclosing(batches):
        async for batch in batches:
            for event in batch:
                yield event


async def collect(events: AsyncGenerator[StreamEvent, None]) -> Completion:
    """Fold a stream into the Completion a non-streaming call would have returned."""
    text: list[str] = []
    completion = Completion(text="")
    async for event in events:
        if isinstance(event, TextDelta):
            text.append(event.text)
        elif isinstance(event, ToolCallEvent):
            completion.tool_calls.append(event.call)
        elif isinstance(event, Usage):
            completion.usage = event
        elif isinstance(event, Finish):
            completion.finish_reason, completion.stop_sequence = event.reason, event.stop_sequence
    completion.text = "".join(text)
    return completion

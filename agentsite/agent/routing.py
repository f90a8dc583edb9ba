"""The model catalogue and the router: which upstream answers a model name, and what happens when it fails.

The catalogue (`Catalogue`) is the enabled connections' models as `<connection>/<model>` and the aliases (an
ordered list of targets with a strategy); a bare name that is neither resolves against the default connection.
A facet supplies it with the settings (`AgentSettings.catalogue`), so resolving costs no query; settings without
one get a catalogue of one connection, `default`. The contract the rest of the code uses: `resolve`,
`catalogue_entries`, `model_names`, `default_model_name`, `routed_provider`.

The router (`Router`) sends one request along a route. It falls back to the next target only when the current one
failed before its first event was handed on (retryable errors, and the 4xx statuses an alias lists in
`fallback_on`); a failed target cools down for AGENTSITE_UPSTREAM_COOLDOWN_S in every process the invalidation
channel reaches. A reply whose upstream reported no usage gets one estimated from the text, never a fake zero.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
import time
from collections.abc import AsyncGenerator, Iterable
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from agentsite.agent.config import get_settings
from agentsite.agent.providers import PROVIDERS, Provider, default_model
from agentsite.agent.providers.base import flatten
from agentsite.agent.types import ChatRequest, Completion, Finish, StreamEvent, TextDelta, ToolCallEvent, Usage
from agentsite.agent.usage import CHARS_PER_TOKEN, prompt_chars
from agentsite.core import metrics, tracing
from agentsite.core.env import env_float
from agentsite.core.errors import AppError

if TYPE_CHECKING:
    from agentsite.agent.config import AgentSettings

logger = logging.getLogger(__name__)

STRATEGIES = ("fallback", "balance", "least_in_flight")
DEFAULT_CONNECTION = "default"
DEFAULT_COOLDOWN_S = 30.0


@dataclass(frozen=True)
class Connection:
    """One upstream. `models` are the names it serves (`discover`: the last discovery's list, which may be
    empty); a connection with `discover` accepts any model name asked of it (the list may be stale)."""

    name: str
    provider: str  # openai | anthropic | offline
    base_url: str = field(default="", repr=False)  # may hold credentials (providers.urls): never shown raw
    api_key: str = field(default="", repr=False)
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    timeout_s: float = 120.0
    enabled: bool = True
    models: tuple[str, ...] = ()
    discover: bool = False
    error: str = ""  # the last discovery's failure, in the upstream's words
    passthrough: bool = False  # unknown request fields (ChatRequest.passthrough) go upstream as sent

    def serves(self, model: str) -> bool:
        return bool(model) and (self.discover or model in self.models)


@dataclass(frozen=True)
class AliasTarget:
    model: str  # a catalogue entry, `<connection>/<model>`
    weight: float = 1.0


@dataclass(frozen=True)
class Alias:
    name: str
    strategy: str  # fallback | balance (weighted round-robin) | least_in_flight (weighted)
    targets: tuple[AliasTarget, ...]
    fallback_on: frozenset[int] = frozenset()  # upstream 4xx statuses that also move on to the next target


@dataclass(frozen=True)
class Target:
    """One upstream model a route may send to: the entry's name, its connection and the model's name there."""

    entry: str
    connection: Connection
    model: str
    weight: float = 1.0


@dataclass(frozen=True)
class Route:
    """What a name stands for: its targets in configured order and how to pick among them. `alias` is True when
    the name was an alias (the answering entry is then reported as the completion's model)."""

    name: str
    strategy: str
    targets: tuple[Target, ...]
    alias: bool = False
    fallback_on: frozenset[int] = frozenset()  # the alias's: upstream 4xx statuses that also fall back

    def falls_back(self, exc: BaseException) -> bool:
        """Whether another target may be tried after this failure: a retryable one (UpstreamError.retryable), or
        an upstream status the alias lists in `fallback_on`."""
        return bool(getattr(exc, "retryable", False)) or getattr(exc, "upstream_status", None) in self.fallback_on


@dataclass(frozen=True)
class CatalogueEntry:
    name: str
    kind: str  # alias | model
    connection: str = ""  # empty for an alias
    provider: str = ""
    model: str = ""
    strategy: str = ""  # an alias's
    targets: tuple[str, ...] = ()  # an alias's
    state: str = "ok"  # ok | cooling | discovery_failed | no_target

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "kind": self.kind, "state": self.state}
        if self.kind == "alias":
            data.update(strategy=self.strategy, targets=list(self.targets))
        else:
            data.update(connection=self.connection, provider=self.provider, model=self.model)
        return data


class Catalogue:
    """Connections and aliases, immutable once built (a change builds a new one)."""

    def __init__(self, connections: Iterable[Connection], aliases: Iterable[Alias] = (), *,
                 default_connection: str = "", default_model: str = ""):
        self.connections = {connection.name: connection for connection in connections}
        self.aliases = {alias.name: alias for alias in aliases}
        self.default_connection = default_connection
        self.default_model = default_model

    @classmethod
    def of_settings(cls, settings: AgentSettings) -> Catalogue:
        """The one-connection catalogue settings without a catalogue stand for."""
        known = settings.provider in PROVIDERS
        # An unknown provider keeps a model, so that using it fails as 503 `unavailable` naming the provider.
        model = settings.model or (default_model(settings.provider) if known else "default")
        connection = Connection(DEFAULT_CONNECTION, settings.provider, settings.base_url, settings.api_key,
                                timeout_s=settings.request_timeout, models=(model,) if model else ())
        return cls([connection], default_connection=DEFAULT_CONNECTION, default_model=settings.model)

    def enabled(self) -> list[Connection]:
        return [connection for connection in self.connections.values() if connection.enabled]

    def entries(self, router: Router | None = None) -> list[CatalogueEntry]:
        router = router or ROUTER
        out: list[CatalogueEntry] = []
        for alias in self.aliases.values():
            live = [target for target in alias.targets if self._target(target.model) is not None]
            out.append(CatalogueEntry(alias.name, "alias", strategy=alias.strategy,
                                      targets=tuple(target.model for target in alias.targets),
                                      state="ok" if live else "no_target"))
        for connection in self.enabled():
            if connection.discover and connection.error and not connection.models:
                out.append(CatalogueEntry(f"{connection.name}/", "model", connection.name, connection.provider,
                                          "", state="discovery_failed"))
            for model in connection.models:
                name = f"{connection.name}/{model}"
                out.append(CatalogueEntry(name, "model", connection.name, connection.provider, model,
                                          state="cooling" if router.cooling(name) else "ok"))
        return out

    def names(self) -> list[str]:
        return [entry.name for entry in self.entries() if entry.state != "discovery_failed"]

    def _target(self, name: str, weight: float = 1.0) -> Target | None:
        connection_name, slash, model = name.partition("/")
        connection = self.connections.get(connection_name) if slash else None
        if connection is None or not connection.enabled or not connection.serves(model):
            return None
        return Target(name, connection, model, weight)

    def resolve(self, name: str) -> Route:
        """The route for `name` (see the module docstring); raises AppError 404 `model_not_found`."""
        name = name or self.default_model_name()
        alias = self.aliases.get(name)
        if alias is not None:
            targets = [self._target(target.model, target.weight) for target in alias.targets]
            live = tuple(target for target in targets if target is not None)
            if not live:
                raise AppError("model_not_found", f"The alias {name!r} has no enabled target (its targets: "
                               f"{', '.join(t.model for t in alias.targets) or 'none'}).", 404)
            return Route(name, alias.strategy, live, alias=True, fallback_on=alias.fallback_on)
        target = self._target(name)
        if target is None and "/" not in name or target is None and name.split("/", 1)[0] not in self.connections:
            default = self.connections.get(self.default_connection)
            if default is not None and default.enabled and default.serves(name):
                target = Target(f"{default.name}/{name}", default, name)
        if target is None:
            raise AppError("model_not_found", f"The model {name!r} does not exist; GET /v1/models lists the "
                           "models.", 404)
        return Route(name, "fallback", (target,))

    def default_model_name(self) -> str:
        """The agent's model: the configured one, else the default connection's first model (or its provider's
        default model)."""
        if self.default_model:
            return self.default_model
        connection = self.connections.get(self.default_connection)
        if connection is None or not connection.enabled:
            connection = next(iter(self.enabled()), None)
        if connection is None:
            return ""
        model = connection.models[0] if connection.models else (
            default_model(connection.provider) if connection.provider in PROVIDERS else "")
        return f"{connection.name}/{model}" if model else ""


# --- the module-level contract --------------------------------------------------------------------------------

def catalogue_of(settings: AgentSettings | None = None) -> Catalogue:
    settings = settings or get_settings()
    catalogue = settings.catalogue
    return catalogue if isinstance(catalogue, Catalogue) else Catalogue.of_settings(settings)


def resolve(name: str, settings: AgentSettings | None = None) -> Route:
    """The route for a model name; raises AppError 404 `model_not_found` naming it."""
    return catalogue_of(settings).resolve(name)


def catalogue_entries(settings: AgentSettings | None = None) -> list[CatalogueEntry]:
    return catalogue_of(settings).entries()


def model_names(settings: AgentSettings | None = None) -> list[str]:
    return catalogue_of(settings).names()


def default_model_name(settings: AgentSettings | None = None) -> str:
    return catalogue_of(settings).default_model_name()


# --- the router ---------------------------------------------------------------------------------------------

@dataclass
class Attempt:
    entry: str
    outcome: str  # answered | failed
    error: str = ""
    status: int | None = None  # the upstream's HTTP status, when it answered one
    failure: str = ""  # refused | timeout, when it never answered (UpstreamError.failure)


@dataclass
class Attempts:
    """One request's tries, in order; `answered` is the entry that answered (None while none has)."""

    tries: list[Attempt] = field(default_factory=list)
    answered: str | None = None

    def summary(self) -> str:
        """For a response header: `hosted/gpt-4o=failed(500); local/llama3=answered`. A failure names the
        upstream's HTTP status, else `refused` or `timeout`, else `error` (a malformed or broken reply)."""
        return "; ".join(f"{a.entry}={a.outcome}" + (f"({a.status or a.failure or 'error'})"
                                                     if a.outcome == "failed" else "") for a in self.tries)


def cooldown_from_env() -> float:
    """AGENTSITE_UPSTREAM_COOLDOWN_S (the settings check it at start-up, so a malformed value stops the server)."""
    return env_float("AGENTSITE_UPSTREAM_COOLDOWN_S", DEFAULT_COOLDOWN_S, minimum=0.0)


class Router:
    """Picks targets and sends a request along them.

    Fallback is exact: the next target is tried only when the current one failed *before its first event was handed
    on* (connection refused, timeout, HTTP 5xx or 429, a malformed first event, also after its success status:
    `UpstreamError.retryable`; and an upstream 4xx whose status the alias lists in `fallback_on`); once an event has
    been yielded nothing is retried, and the failure reaches the caller as it happened. Usage is never a fake zero:
    a reply whose upstream reported no usage (llama.cpp never does in a stream) gets one estimated from the text
    (`Usage.estimated`; CHARS_PER_TOKEN characters a token, the prompt as the meter counts it), before its Finish;
    the meter records the same figures. The empty list that says an upstream answered (Provider.stream_batches) is
    handed on once, for the first target that answers, which is then `answered` (a caller names it in its reply's
    headers and `model`); should it fail before its first event after all, its try is recorded failed and the next
    target's answer replaces it. Any other error (a 4xx: bad request, bad key) is raised at once, untried elsewhere.
    A target that failed is skipped for `AGENTSITE_UPSTREAM_COOLDOWN_S` seconds (30) by later requests, in every
    process the invalidation channel reaches (Router), unless every target of the route is cooling down. Each
    request's attempts go into an `Attempts` record (also logged), whose `answered` names the entry that answered.

    State is per process: the cool-down deadlines, the in-flight counts and the round-robin positions. Safe on
    one event loop; the counters are under a lock so that several loops (q2 workers) may share it. The shared
    router (ROUTER) also announces each cool-down it starts on the invalidation channel (topic `upstream_cooling`,
    key: the entry), and every process that hears it cools that entry down too, for its own cool-down: a dead
    upstream costs the deployment one timeout, not one per worker. Nothing is read per request: a request
    looks only at this process's deadlines."""

    def __init__(self, cooldown_s: float | None = None, clock: Any = time.monotonic, *, shared: bool = False):
        self.cooldown_s = cooldown_from_env() if cooldown_s is None else cooldown_s
        self.clock = clock
        self.shared = shared  # announce its cool-downs to every process (the process-wide ROUTER)
        self._cool_until: dict[str, float] = {}
        self._in_flight: dict[str, int] = {}
        self._current: dict[tuple[str, str], float] = {}  # smooth weighted round-robin, per (route, entry)
        self._providers: dict[tuple[Connection, str], Provider] = {}
        self._lock = threading.Lock()

    def cooling(self, entry: str) -> bool:
        until = self._cool_until.get(entry)
        return until is not None and self.clock() < until

    def in_flight(self, entry: str) -> int:
        return self._in_flight.get(entry, 0)

    def forget(self, connection: str) -> None:
        """Clear the cool-downs of a connection's entries: it was changed, deleted or made anew (an operator
        who fixes an upstream's URL or key, or deletes and re-adds it under the same name, gets it tried at
        once, not after what is left of the old one's cool-down). Called in every process through the
        invalidation channel (accounts: the `connection` topic)."""
        prefix = f"{connection}/"
        with self._lock:
            for entry in [entry for entry in self._cool_until if entry.startswith(prefix)]:
                del self._cool_until[entry]

    def order(self, route: Route) -> list[Target]:
        """The targets to try, in order: cooling ones left out unless all are cooling; `balance` and
        `least_in_flight` put their pick first, the others follow in configured order."""
        targets = list(route.targets)
        if len(targets) > 1:
            warm = [target for target in targets if not self.cooling(target.entry)]
            targets = warm or targets
        if len(targets) < 2 or route.strategy == "fallback":
            return targets
        pick = self._least_in_flight(targets) if route.strategy == "least_in_flight" else None
        pick = pick or self._round_robin(route.name, targets)
        return [pick] + [target for target in targets if target is not pick]

    def _round_robin(self, name: str, targets: list[Target]) -> Target:
        # Smooth weighted round-robin (nginx): every target gains its weight, the richest is picked and pays the
        # total. Over any run of sum(weights) picks each target is picked exactly its weight's share.
        with self._lock:
            total = sum(max(target.weight, 0.0) for target in targets) or float(len(targets))
            best, best_score = targets[0], float("-inf")
            for target in targets:
                key = (name, target.entry)
                score = self._current.get(key, 0.0) + (max(target.weight, 0.0) or (0.0 if total else 1.0))
                self._current[key] = score
                if score > best_score:
                    best, best_score = target, score
            self._current[(name, best.entry)] = best_score - total
            return best

    def _least_in_flight(self, targets: list[Target]) -> Target | None:
        loads = [(self.in_flight(target.entry) / max(target.weight, 1e-9), index) for index, target in
                 enumerate(targets)]
        lowest = min(load for load, _ in loads)
        tied = [targets[index] for load, index in loads if load == lowest]
        return tied[0] if len(tied) == 1 else None  # a tie: round-robin among all spreads evenly

    def provider(self, target: Target) -> Provider:
        key = (target.connection, target.model)
        provider = self._providers.get(key)
        if provider is None:
            connection = target.connection
            cls = PROVIDERS.get(connection.provider)
            if cls is None:
                raise AppError("unavailable", f"The connection {connection.name!r} names the LLM provider "
                               f"{connection.provider!r}, which is not one of {', '.join(sorted(PROVIDERS))}.", 503)
            provider = cls(base_url=connection.base_url, api_key=connection.api_key, model=target.model,
                           timeout=connection.timeout_s, headers=dict(connection.headers))
            if len(self._providers) > 512:
                self._providers.clear()
            self._providers[key] = provider
        return provider

    def _count(self, entry: str, delta: int) -> None:
        with self._lock:
            self._in_flight[entry] = self._in_flight.get(entry, 0) + delta

    def _failed(self, attempts: Attempts, target: Target, exc: AppError) -> None:
        status = getattr(exc, "upstream_status", None)
        attempts.tries.append(Attempt(target.entry, "failed", exc.message, status, getattr(exc, "failure", "")))
        if getattr(exc, "retryable", False) and self.cooldown_s > 0:
            self._cool_until[target.entry] = self.clock() + self.cooldown_s
            if self.shared:
                announce_cooling(target.entry)

    def cool(self, entry: str) -> None:
        """Skip `entry` for the cool-down from now (another process saw it fail)."""
        if self.cooldown_s > 0:
            with self._lock:
                self._cool_until[entry] = self.clock() + self.cooldown_s

    def _answered(self, attempts: Attempts, target: Target) -> None:
        attempts.tries.append(Attempt(target.entry, "answered"))
        attempts.answered = target.entry
        self._cool_until.pop(target.entry, None)
        if len(attempts.tries) > 1:
            logger.info("Model %s answered by %s after %s", target.entry, attempts.answered, attempts.summary())

    @staticmethod
    def _request_for(target: Target, request: ChatRequest) -> ChatRequest:
        return replace(request, settings=replace(request.settings, model=target.model))

    async def stream_batches(self, route: Route, request: ChatRequest,
                             attempts: Attempts | None = None) -> AsyncGenerator[list[StreamEvent], None]:
        """The first target that gets its first event out answers; see the class docstring. The first list may
        be empty (Provider.stream_batches: an upstream answered, no event yet); it is passed on once, and a
        target that fails after it is still one that failed before its first event."""
        attempts = attempts if attempts is not None else Attempts()
        targets = self.order(route)
        announced = False
        for index, target in enumerate(targets):
            last = index == len(targets) - 1
            self._count(target.entry, 1)
            label, status = metric_model(target), "error"
            started = time.perf_counter()
            span, usage = _llm_span(target, request), [0, 0]
            texts: list[str] = []
            failure: BaseException | None = None
            try:
                batches = self.provider(target).stream_batches(self._request_for(target, request))
                async with aclosing(batches):
                    provisional = False  # its success status made it the answering entry, no event yet
                    try:
                        with tracing.current(span):  # the request goes out here: traceparent names the span
                            first = await anext(batches)
                        if not first:  # answered, nothing ready: the caller may start its reply, naming it
                            self._answered(attempts, target)
                            provisional = True
                            if not announced:
                                announced = True
                                yield first  # (outside the span's context: a generator's caller would see it)
                            first = await anext(batches)
                    except StopAsyncIteration:
                        first = []
                    except AppError as exc:
                        if provisional:  # failed before its first event after all: a failed try, not both
                            attempts.tries.pop()
                            attempts.answered = None
                        self._failed(attempts, target, exc)
                        status = metric_status(exc)
                        if last or not route.falls_back(exc):
                            logger.warning("Model %s failed: %s", route.name, attempts.summary())
                            raise
                        metrics.upstream_fallback()
                        continue
                    metrics.llm_first_token(label, time.perf_counter() - started)
                    if not provisional:
                        self._answered(attempts, target)
                    estimate = UsageEstimate(request)
                    first = estimate.see(first)
                    if first:
                        _count_tokens(label, first)
                        _span_saw(span, first, usage, texts)
                        yield first
                    async for batch in batches:  # from here on, a failure is the caller's: never retried
                        batch = estimate.see(batch)
                        _count_tokens(label, batch)
                        _span_saw(span, batch, usage, texts)
                        yield batch
                    status = "ok"
                    return
            except AppError as exc:
                status, failure = metric_status(exc), exc
                raise
            except (GeneratorExit, asyncio.CancelledError) as exc:
                status, failure = "cancelled", exc  # the caller stopped reading: not the upstream's failure
                raise
            finally:
                self._count(target.entry, -1)
                metrics.llm_request(label, target.connection.name, status)
                _llm_span_end(span, target, failure if status != "ok" else None, usage, texts)

    async def complete(self, route: Route, request: ChatRequest, attempts: Attempts | None = None) -> Completion:
        """A whole reply (the providers' non-streaming call) with the same fallback rules."""
        attempts = attempts if attempts is not None else Attempts()
        targets = self.order(route)
        for index, target in enumerate(targets):
            self._count(target.entry, 1)
            label = metric_model(target)
            span = _llm_span(target, request)
            try:
                with tracing.current(span):
                    reply = await self.provider(target).complete(self._request_for(target, request))
            except AppError as exc:
                _llm_span_end(span, target, exc, [0, 0], [])
                self._failed(attempts, target, exc)
                metrics.llm_request(label, target.connection.name, metric_status(exc))
                if index == len(targets) - 1 or not route.falls_back(exc):
                    logger.warning("Model %s failed: %s", route.name, attempts.summary())
                    raise
                metrics.upstream_fallback()
                continue
            except BaseException as exc:
                _llm_span_end(span, target, exc, [0, 0], [])
                metrics.llm_request(label, target.connection.name, "error")
                raise
            finally:
                self._count(target.entry, -1)
            metrics.llm_request(label, target.connection.name, "ok")
            if reply.usage.total_tokens == 0:  # the upstream said nothing (or zeros): never a fake zero
                reply.usage = estimated_usage(request, completion_chars(reply))
            metrics.llm_tokens(label, reply.usage.prompt_tokens, reply.usage.completion_tokens)
            _llm_span_end(span, target, None, [reply.usage.prompt_tokens, reply.usage.completion_tokens],
                          [reply.text])
            self._answered(attempts, target)
            return reply
        raise AppError("model_not_found", f"The model {route.name!r} has no target.", 404)  # a route is never empty


ROUTER = Router(shared=True)
COOLING_TOPIC = "upstream_cooling"


def announce_cooling(entry: str) -> None:
    """Tell every process that `entry` failed (agentsite.core.invalidation); off the event loop, since with Redis
    the announcement is a network call, and never raising: a lost announcement costs the others one timeout."""
    from agentsite.core import invalidation  # Django's settings: only once a failure is announced

    def send() -> None:
        try:
            invalidation.announce(COOLING_TOPIC, entry)
        except Exception:  # noqa: BLE001 - no settings (a runtime without Django) or no channel
            logger.warning("Could not announce the cool-down of %s to other processes", entry, exc_info=True)

    try:
        asyncio.get_running_loop().run_in_executor(None, send)
    except RuntimeError:  # no running loop
        send()


def cool_entry(entry: object) -> None:
    """The `upstream_cooling` topic's subscriber: `entry` failed in another process (None, after the listener
    reconnected: nothing to do, a cool-down missed costs one timeout)."""
    if isinstance(entry, str) and entry:
        ROUTER.cool(entry)


def estimated_usage(request: ChatRequest, completion_chars: int) -> Usage:
    """The documented estimate: CHARS_PER_TOKEN characters a token, of the prompt as the meter counts it
    (agentsite.agent.usage.prompt_chars) and of the reply's text and tool calls."""
    return Usage(math.ceil(prompt_chars(request) / CHARS_PER_TOKEN), math.ceil(completion_chars / CHARS_PER_TOKEN),
                 estimated=True)


def event_chars(event: StreamEvent) -> int:
    if isinstance(event, TextDelta):
        return len(event.text)
    if isinstance(event, ToolCallEvent):
        return len(event.call.name) + len(json.dumps(event.call.arguments))
    return 0


def completion_chars(reply: Completion) -> int:
    return len(reply.text) + sum(len(call.name) + len(json.dumps(call.arguments)) for call in reply.tool_calls)


class UsageEstimate:
    """Watches one answering target's batches and puts an estimated Usage before the Finish when the upstream
    sent none with tokens in it."""

    def __init__(self, request: ChatRequest):
        self.request = request
        self.chars = 0
        self.reported = False

    def see(self, batch: list[StreamEvent]) -> list[StreamEvent]:
        for position, event in enumerate(batch):
            if isinstance(event, Usage) and event.total_tokens > 0:
                self.reported = True
            elif isinstance(event, Finish) and not self.reported:
                self.reported = True
                kept = [item for item in batch[:position] if not isinstance(item, Usage)]  # a zero one: replaced
                return [*kept, estimated_usage(self.request, self.chars), *batch[position:]]
            else:
                self.chars += event_chars(event)
        return batch


def forget_connection(connection: object) -> None:
    """The `connection` topic's subscriber: `connection` is the changed connection's name."""
    if isinstance(connection, str) and connection:
        ROUTER.forget(connection)


def metric_model(target: Target) -> str:
    """A bounded `model` label: the catalogue entry when its connection lists the model (the operator's list
    or the last discovery's), else `other` (a discovering connection accepts any name a caller sends)."""
    return target.entry if target.model in target.connection.models else "other"


def metric_status(exc: BaseException) -> str:
    """A bounded `status` label: the upstream's HTTP status, else `error`."""
    status = getattr(exc, "upstream_status", None)
    return str(status) if isinstance(status, int) and 100 <= status <= 599 else "error"


def _llm_span(target: Target, request: ChatRequest) -> Any:
    """A span per upstream call (GenAI semantic conventions); prompts only with AGENTSITE_OTEL_CAPTURE_CONTENT=1."""
    if not tracing.ENABLED:
        return None
    content = None
    if tracing.CAPTURE_CONTENT:
        content = json.dumps([{"role": message.role, "content": message.text} for message in request.messages],
                             ensure_ascii=False, default=str)
    return tracing.start(f"chat {target.model}", "client", **{
        "gen_ai.operation.name": "chat", "gen_ai.request.model": target.model,
        "gen_ai.provider.name": target.connection.provider, "agentsite.upstream": target.connection.name,
        "gen_ai.input.messages": content})


def _span_saw(span: Any, batch: list[StreamEvent], usage: list[int], texts: list[str]) -> None:
    if span is None:
        return
    for event in batch:
        if isinstance(event, Usage):
            usage[0] += event.prompt_tokens
            usage[1] += event.completion_tokens
        elif isinstance(event, TextDelta) and tracing.CAPTURE_CONTENT:
            texts.append(event.text)


def _llm_span_end(span: Any, target: Target, error: BaseException | None, usage: list[int], texts: list[str]) -> None:
    if span is None:
        return
    tracing.end(span, error, **{
        "gen_ai.response.model": target.model if error is None else None,
        "gen_ai.usage.input_tokens": usage[0] if error is None else None,
        "gen_ai.usage.output_tokens": usage[1] if error is None else None,
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "content": "".join(texts)}], ensure_ascii=False)
        if tracing.CAPTURE_CONTENT and error is None else None})


def _count_tokens(label: str, batch: list[StreamEvent]) -> None:
    if metrics.ENABLED:
        for event in batch:
            if isinstance(event, Usage):
                metrics.llm_tokens(label, event.prompt_tokens, event.completion_tokens)


def reset_router(cooldown_s: float | None = None) -> Router:
    """A fresh process-wide router (tests; the environment's cool-down is read again)."""
    global ROUTER
    ROUTER = Router(cooldown_s, shared=True)
    return ROUTER


class RoutedProvider(Provider):
    """A Provider that answers through the router: what the agent loop and /v1 hold. `attempts` is the last
    call's record (one RoutedProvider per request)."""

    name = "routed"
    default_model = ""

    def __init__(self, route: Route, router: Router | None = None):
        super().__init__()
        self.route = route
        self.router = router
        self.attempts = Attempts()

    def stream(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        return flatten(self.stream_batches(request))

    def stream_batches(self, request: ChatRequest) -> AsyncGenerator[list[StreamEvent], None]:
        self.attempts = Attempts()
        return (self.router or ROUTER).stream_batches(self.route, request, self.attempts)

    async def complete(self, request: ChatRequest) -> Completion:
        self.attempts = Attempts()
        return await (self.router or ROUTER).complete(self.route, request, self.attempts)


def routed_provider(settings: AgentSettings, model: str | None = None) -> RoutedProvider:
    """A provider for `model` (default: the settings' model) through the process's router. Raises 404."""
    return RoutedProvider(resolve(model if model is not None else settings.model, settings))


__all__ = ["STRATEGIES", "Alias", "AliasTarget", "Attempt", "Attempts", "Catalogue", "CatalogueEntry",
           "Connection", "Route", "RoutedProvider", "Router", "Target", "catalogue_entries",
           "catalogue_of", "default_model_name", "model_names", "reset_router", "resolve", "routed_provider"]

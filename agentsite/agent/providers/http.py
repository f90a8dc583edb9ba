"""HTTP plumbing the network providers share: one pooled client per event loop, SSE parsing, error mapping.

Every failure leaves here as one `UpstreamError` (an `AppError("upstream_error")`) whose message names the
provider and carries the upstream's own words, with every credential scrubbed out (the API key, the base URL's
password and query values, the connection's header values: `Upstream.secrets`; each as a whole token and only
from MIN_REDACTED characters on, `redact`; a URL is named only as `urls.mask_url` shows it), and which says
whether another upstream may be tried (`retryable`; the Provider base class states the rule). An upstream that
refused the request as the caller's fault (a 4xx the caller can act on) keeps that status and the upstream's own
`type`/`code`/`param`; every other failure is a 502.
"""

from __future__ import annotations

import asyncio
import codecs
import functools
import json
import logging
import re
import socket
import ssl
import urllib.parse
import urllib.request
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import certifi
import httpx

from agentsite.agent.providers.urls import mask_url
from agentsite.core import tracing
from agentsite.core.errors import AppError

logger = logging.getLogger(__name__)

# An error body is read only this far: it is for a message, and a hostile upstream could send gigabytes.
MAX_ERROR_BODY = 16_384
MAX_MESSAGE_CHARS = 500
CONNECT_TIMEOUT = 10.0

# httpx pools connections per client, and a client belongs to the event loop that opened its connections
# (daphne has one loop; a q2 worker or a test may run several in turn), so there is one client per loop.
_clients: dict[asyncio.AbstractEventLoop, tuple[httpx.AsyncClient, AsyncIterator[None]]] = {}


def shared_client() -> httpx.AsyncClient:
    loop = asyncio.get_running_loop()
    entry = _clients.get(loop)
    if entry is None or entry[0].is_closed:
        for old_loop in [old for old in list(_clients) if old.is_closed()]:
            _clients.pop(old_loop, None)  # a loop that closed without shutting its async generators down
        client = httpx.AsyncClient(limits=httpx.Limits(max_connections=100, max_keepalive_connections=20))
        entry = _clients[loop] = (client, _closed_with_the_loop(_clients, client.aclose))
    return entry[0]


def _closed_with_the_loop(registry: dict, close: Callable[[], Awaitable[Any]]) -> AsyncIterator[None]:
    """A started async generator that, when closed, drops this loop's entry from `registry` and awaits
    `close()`. asyncio.run(), asgiref's async_to_sync and pytest-asyncio close every live async generator of a
    loop before closing the loop, which is the only end-of-loop hook asyncio offers; so a pool's sockets close
    cleanly with their loop.
    """

    async def close_at_shutdown() -> AsyncIterator[None]:
        try:
            yield
        finally:
            registry.pop(asyncio.get_running_loop(), None)
            await close()

    generator = close_at_shutdown()
    try:
        # __anext__() is typed an Awaitable; an async generator's is a coroutine, which has send().
        generator.__anext__().send(None)  # type: ignore[attr-defined]  # runs it to its yield at once; that registers it with the loop
    except StopIteration:
        pass
    return generator


# Upstream 4xx statuses that are the operator's to fix, not the caller's: agentsite's own key or proxy for the
# upstream was refused. Passed on as they are, a client would take them for a refusal of its own credential.
OPERATOR_STATUSES = frozenset({401, 403, 407})


def caller_status(upstream_status: int | None) -> int:
    """The status a caller gets for an upstream failure: the upstream's own 4xx when it refused the request
    (the prompt is over the context, a field is invalid, a rate limit), else 502."""
    if upstream_status is not None and 400 <= upstream_status < 500 and upstream_status not in OPERATOR_STATUSES:
        return upstream_status
    return 502


class UpstreamError(AppError):
    """An upstream failure: `upstream_status` is the HTTP status the upstream answered (None: it never did, or
    its reply was malformed); `failure` says how it failed when it never answered: `refused` (the connection was
    refused), `timeout` (no answer within the connection's timeout), else ""; `retryable` is True unless it was
    a 4xx other than 429. Its status is
    caller_status(upstream_status); `details` name the provider and, when the upstream answered, its `status`
    and its error's `type`, `code` and `param` (each None when the upstream's body had none)."""

    def __init__(self, message: str, *, upstream_status: int | None = None, details: dict[str, Any] | None = None,
                 failure: str = ""):
        super().__init__("upstream_error", message, status=caller_status(upstream_status), details=details)
        self.upstream_status = upstream_status
        self.failure = failure

    @property
    def retryable(self) -> bool:
        status = self.upstream_status
        return status is None or status == 429 or status >= 500


# A secret shorter than this is not looked for in free text: it cannot be told from ordinary words (the key `x`
# would blank every "x"), and a key that short is a placeholder for a server that checks none. A URL holding it is
# still shown masked (urls.mask_url), whatever its length.
MIN_REDACTED = 8
# The characters a key is made of: a secret found inside a longer run of them blanks the whole run, never a piece.
# A match starts only where a run starts (the lookbehind): from anywhere else the leading run would be re-scanned at
# every position, quadratic in an error body of one long run.
_TOKEN_START, _TOKEN_CHARS = "(?<![A-Za-z0-9_-])", "[A-Za-z0-9_-]*"


@dataclass
class Upstream:
    """One provider's endpoint: who it is (for messages), where (`url`: no userinfo, maybe a query), with which
    headers, and what to scrub out of every message: the key and `secrets` (Provider.secrets())."""

    provider: str
    url: str = field(repr=False)
    headers: dict[str, str] = field(repr=False)
    api_key: str = field(default="", repr=False)
    timeout: float = 120.0
    secrets: tuple[str, ...] = field(default=(), repr=False)

    @property
    def shown_url(self) -> str:
        return mask_url(self.url)

    def scrub(self, text: str) -> str:
        text = text.replace(self.url, self.shown_url) if self.url else text
        return redact(text, (self.api_key, *self.secrets))

    def error(self, message: str, *, status: int | None = None, failure: str = "") -> UpstreamError:
        text = self.scrub(message)[:MAX_MESSAGE_CHARS]
        where = f"The LLM provider ({self.provider})"
        sentence = f"{where} answered {status}: {text}" if status else f"{where} failed: {text}"
        details: dict[str, Any] = {"provider": self.provider}
        if status:
            details["status"] = status
        logger.warning("%s", sentence)
        return UpstreamError(sentence, upstream_status=status, details=details, failure=failure)

    def refused(self, body: bytes, status: int) -> UpstreamError:
        """The error for an upstream's error status: a caller's 4xx carries the upstream's own message and its
        `type`/`code`/`param`; any other status is said as the provider's failure."""
        fields = error_fields(body)
        if caller_status(status) == 502:
            return self.error(fields["message"], status=status)
        message = self.scrub(fields["message"])[:MAX_MESSAGE_CHARS]
        logger.warning("The LLM provider (%s) refused the request with %s: %s", self.provider, status, message)
        details = {"provider": self.provider, "status": status,
                   **{key: self.scrub(str(fields[key])) if fields[key] is not None else None
                      for key in ("type", "code", "param")}}
        return UpstreamError(message, upstream_status=status, details=details)


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret of MIN_REDACTED characters or more replaced by `[redacted]`, together with the
    run of key characters ([A-Za-z0-9_-]) it stands in: a whole token goes, never a piece of a word. A header
    value with a scheme (`Bearer <token>`) counts its token as a secret too."""
    return _secrets_pattern(tuple(secrets)).sub("[redacted]", text)


@functools.lru_cache(maxsize=64)  # one connection's secrets, for every error it has
def _secrets_pattern(secrets: tuple[str, ...]) -> re.Pattern[str]:
    found = {part for secret in secrets
             for part in (secret, secret.partition(" ")[2] if secret.count(" ") == 1 else "")}
    wanted = sorted((secret for secret in found if len(secret) >= MIN_REDACTED), key=len, reverse=True)
    if not wanted:
        return re.compile("(?!)")  # matches nothing
    return re.compile(f"{_TOKEN_START}{_TOKEN_CHARS}(?:{'|'.join(map(re.escape, wanted))}){_TOKEN_CHARS}")


def error_fields(body: bytes) -> dict[str, Any]:
    """An upstream error body's `message` (error_text) and its error's `type`, `code` and `param` (OpenAI's
    shape; Anthropic's has a `type`), each None when absent or not a string/number."""
    fields: dict[str, Any] = {"message": error_text(body), "type": None, "code": None, "param": None}
    try:
        parsed = json.loads(body[:MAX_ERROR_BODY])
    except ValueError:
        return fields
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(error, dict):
        for key in ("type", "code", "param"):
            value = error.get(key)
            if isinstance(value, str | int) and not isinstance(value, bool):
                fields[key] = str(value)[:200]
    return fields


def error_text(body: bytes) -> str:
    """The human part of an upstream error body: OpenAI's and Anthropic's shapes, else the raw text."""
    raw = body[:MAX_ERROR_BODY].decode("utf-8", "replace").strip()
    try:
        parsed = json.loads(raw)
    except ValueError:
        return raw or "(empty body)"
    if isinstance(parsed, dict):
        error = parsed.get("error", parsed)
        if isinstance(error, dict):
            message = error.get("message") or error.get("detail")
            if message:
                return str(message)
        elif isinstance(error, str):
            return error
        if parsed.get("detail"):
            return str(parsed["detail"])
    return raw


def transport_error(upstream: Upstream, exc: BaseException) -> AppError:
    if isinstance(exc, TimeoutError):  # aiohttp's connect and read timeouts are TimeoutErrors
        return upstream.error(f"no answer from {upstream.shown_url} within {upstream.timeout:g} s "
                              f"({type(exc).__name__}).", failure="timeout")
    if isinstance(exc, aiohttp.ClientConnectorError) and not isinstance(exc, aiohttp.ClientSSLError):
        refused = isinstance(exc.os_error, ConnectionRefusedError)
        return upstream.error(f"could not connect to {upstream.shown_url}: {connect_failure(exc.os_error)}.",
                              failure="refused" if refused else "")
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.InvalidURL):
        return upstream.error(f"could not connect to {upstream.shown_url}: {exc or type(exc).__name__}.")
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError | aiohttp.ClientOSError):
        return upstream.error(f"the connection broke before the reply was complete ({exc or type(exc).__name__}).")
    return upstream.error(f"{type(exc).__name__}: {exc}")


def connect_failure(os_error: OSError) -> str:
    """Why a connection failed, in words: aiohttp's own text names its TLS setting ("ssl:default") even for a
    plain http:// URL, which sent readers looking for a certificate problem."""
    if isinstance(os_error, ConnectionRefusedError):
        return "the connection was refused (is the server running, and on that port?)"
    if isinstance(os_error, socket.gaierror):
        return f"the host name did not resolve ({os_error.strerror or os_error})"
    return os_error.strerror or str(os_error) or type(os_error).__name__


# The upstream's own client: aiohttp. httpx spent ~2 ms of CPU per request at concurrency 32 in its pool's
# bookkeeping (every idle connection polled on every request) against aiohttp's ~0.13 ms, which was half of
# a /v1 request's server time (bench/RESULTS.md). One session per event loop, closed with its loop.
_sessions: dict[asyncio.AbstractEventLoop, tuple[aiohttp.ClientSession, AsyncIterator[None]]] = {}
UPSTREAM_ERRORS = (aiohttp.ClientError, TimeoutError)


def upstream_session() -> aiohttp.ClientSession:
    loop = asyncio.get_running_loop()
    entry = _sessions.get(loop)
    if entry is None or entry[0].closed:
        for old_loop in [old for old in list(_sessions) if old.is_closed()]:
            _sessions.pop(old_loop, None)
        connector = aiohttp.TCPConnector(limit=100, ssl=ssl.create_default_context(cafile=certifi.where()))
        # No cookie jar: every call stands alone. Proxies come from _proxy_for (aiohttp's trust_env would read
        # ~/.netrc again on every request).
        session = aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar(),
                                        auto_decompress=True, raise_for_status=False)
        entry = _sessions[loop] = (session, _closed_with_the_loop(_sessions, session.close))
    return entry[0]


def _request(upstream: Upstream, body: dict[str, Any]) -> aiohttp.client._RequestContextManager:
    """The POST as an aiohttp request context: the body encoded as httpx did (UTF-8, compact, no NaN)."""
    try:
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
    except ValueError as exc:  # NaN or infinity: no upstream would take it
        raise upstream.error(f"the request could not be encoded as JSON ({exc}).") from None
    timeout = aiohttp.ClientTimeout(total=None, connect=upstream.timeout, sock_read=upstream.timeout,
                                    sock_connect=min(upstream.timeout, CONNECT_TIMEOUT))
    headers = tracing.inject({"Content-Type": "application/json", **upstream.headers})  # traceparent, if tracing
    return upstream_session().post(upstream.url, data=data, headers=headers, timeout=timeout,
                                   proxy=_proxy_for(upstream.url))


@functools.lru_cache(maxsize=256)
def _proxy_for(url: str) -> str | None:
    """The proxy the environment names for url (HTTPS_PROXY/HTTP_PROXY/ALL_PROXY, minus NO_PROXY), as httpx
    applied it; read once per URL, since the environment does not change while the process runs."""
    parts = urllib.parse.urlsplit(url)
    # Undocumented (typeshed leaves it out) but in urllib.request since Python 3.x; what getproxies() pairs with.
    if urllib.request.proxy_bypass_environment(parts.hostname or ""):  # type: ignore[attr-defined]
        return None
    proxies = urllib.request.getproxies_environment()
    return proxies.get(parts.scheme) or proxies.get("all")


async def post_json(upstream: Upstream, body: dict[str, Any]) -> dict[str, Any]:
    """POST a JSON body and return the JSON reply; raises the upstream AppError."""
    try:
        async with _request(upstream, body) as response:
            if response.status >= 400:
                raise upstream.refused(await _read_capped(response), response.status)
            content = await response.read()
    except UPSTREAM_ERRORS as exc:
        raise transport_error(upstream, exc) from None
    try:
        data = json.loads(content)
    except ValueError:
        raise upstream.error(f"the reply was not JSON: {content[:200].decode('utf-8', 'replace')!r}") from None
    if not isinstance(data, dict):
        raise upstream.error("the reply was not a JSON object.")
    return data


async def get_json(upstream: Upstream) -> Any:
    """GET upstream.url and return its JSON reply (discovery); raises the upstream AppError."""
    timeout = aiohttp.ClientTimeout(total=upstream.timeout, sock_connect=min(upstream.timeout, CONNECT_TIMEOUT))
    headers = {name: value for name, value in upstream.headers.items() if name.lower() != "content-type"}
    try:
        async with upstream_session().get(upstream.url, headers=headers, timeout=timeout,
                                          proxy=_proxy_for(upstream.url)) as response:
            if response.status >= 400:
                raise upstream.refused(await _read_capped(response), response.status)
            content = await response.content.read(4 * 1024 * 1024)
    except UPSTREAM_ERRORS as exc:
        raise transport_error(upstream, exc) from None
    try:
        return json.loads(content)
    except ValueError:
        raise upstream.error(f"the reply was not JSON: {content[:200].decode('utf-8', 'replace')!r}") from None


def model_ids(upstream: Upstream, data: Any) -> list[str]:
    """The ids of a model list in OpenAI's (`{"data": [{"id"}]}`) or Anthropic's shape (the same, plus paging
    fields), or Ollama's older `{"models": [{"name"}]}`; raises the upstream AppError for anything else."""
    items = data.get("data", data.get("models")) if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise upstream.error("the model list did not have the expected shape ({\"data\": [{\"id\": ...}]}).")
    names = [str(item.get("id") or item.get("name") or "") for item in items if isinstance(item, dict)]
    return sorted({name for name in names if name})


@dataclass(frozen=True)
class SseEvent:
    event: str
    data: str


async def stream_sse_batches(upstream: Upstream, body: dict[str, Any]) -> AsyncGenerator[list[SseEvent], None]:
    """POST a JSON body and yield the reply's server-sent events, a list per network read: the events that
    read completed. Nothing waits for a later read, so a consumer that writes a list out at once delays no
    event; events a fast upstream sent together cost one step instead of one each. The first list is what came
    with the upstream's success status, at once: it is empty when no event came with it (a model still
    thinking), so a consumer knows the upstream answered; later lists are never empty. Raises the upstream
    AppError (before the first list: it did not answer).

    Leaving the generator early (a cancelled consumer, aclose()) closes the connection (a half-read one is
    never returned to the pool); one read to its end goes back to the pool.
    """
    context = _request(upstream, body)
    try:
        response = await context.__aenter__()
    except UPSTREAM_ERRORS as exc:
        raise transport_error(upstream, exc) from None
    complete = False
    try:
        if response.status >= 400:
            raise upstream.refused(await _read_capped(response), response.status)
        decoder = SseDecoder()
        ready = response.content.read_nowait()  # what came with the headers, without waiting for more
        yield decoder.feed(ready) if ready else []
        async for chunk in response.content.iter_any():
            events = decoder.feed(chunk)
            if events:
                yield events
        events = decoder.end()
        if events:
            yield events
        complete = True
    except UPSTREAM_ERRORS as exc:
        raise transport_error(upstream, exc) from None
    finally:
        # Synchronous on purpose: a cancellation arriving here cannot interrupt it or be swallowed by it.
        if complete:
            response.release()
        else:
            response.close()


async def events_by_read(reads: AsyncGenerator[list[SseEvent], None],
                         feed: Callable[[SseEvent], list[Any]]) -> AsyncGenerator[list[Any], None]:
    """stream_sse_batches' reads turned into a provider's stream events by `feed` (one SSE event in, its stream
    events out), a list per read. The first list comes at once, empty when the first read gave no event (the
    upstream answered: Provider.stream_batches); later ones are never empty. When feed raises AppError, the
    events that read gave before the failing one still come out first."""
    first = True
    async for read in reads:
        events: list[Any] = []
        try:
            for sse in read:
                events += feed(sse)
        except AppError:
            if events:
                yield events
            raise
        if events or first:
            yield events
        first = False


_LINE_BREAK = re.compile("\r\n|\r|\n")


class SseDecoder:
    """Server-sent events from a body's bytes, however its chunks fall.

    `feed(chunk)` returns the events that chunk completed, `end()` those the end of the body completes.
    Lines end at CRLF, CR or LF (a CRLF or a UTF-8 character split between chunks is joined); the WHATWG
    field rules apply: a blank line ends an event, a line starting with ':' is a comment, `data` lines are
    joined with newlines, `event` names the event ("message" when absent), other fields are ignored. A body
    that ends without the final blank line (or line break) still delivers its last event.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._pending = ""  # the start of a line whose end has not arrived
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[SseEvent]:
        # The commonest read, one whole `data:` line and its blank line with nothing held from the last read,
        # is the event at once: the same event as the general path below gives, without its line splitting.
        if (not self._pending and not self._data and not self._event and chunk[:6] == b"data: "
                and chunk[-2:] == b"\n\n" and chunk.count(b"\n") == 2 and b"\r" not in chunk
                and not self._decoder.getstate()[0]):
            return [SseEvent("message", chunk[6:-2].decode("utf-8", "replace"))]
        text = self._pending + self._decoder.decode(chunk)
        held = text.endswith("\r")  # maybe the first half of a CRLF whose LF comes in the next chunk
        lines = _LINE_BREAK.split(text[:-1] if held else text)
        self._pending = lines.pop() + ("\r" if held else "")
        return self._fields(lines)

    def end(self) -> list[SseEvent]:
        lines = _LINE_BREAK.split(self._pending + self._decoder.decode(b"", final=True))
        self._pending = ""
        if not lines[-1]:
            lines.pop()
        events = self._fields(lines)
        if self._data:
            events.append(SseEvent(self._event or "message", "\n".join(self._data)))
            self._event, self._data = "", []
        return events

    def _fields(self, lines: list[str]) -> list[SseEvent]:
        events: list[SseEvent] = []
        for line in lines:
            if not line:
                if self._data:
                    events.append(SseEvent(self._event or "message", "\n".join(self._data)))
                self._event, self._data = "", []
                continue
            if line[0] == ":":
                continue
            name, _, value = line.partition(":")
            if value[:1] == " ":
                value = value[1:]
            if name == "data":
                self._data.append(value)
            elif name == "event":
                self._event = value
        return events


async def _read_capped(response: aiohttp.ClientResponse) -> bytes:
    body = bytearray()
    async for chunk in response.content.iter_any():
        body += chunk
        if len(body) >= MAX_ERROR_BODY:
            break
    return bytes(body)

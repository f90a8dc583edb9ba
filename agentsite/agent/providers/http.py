"""HTTP plumbing the network providers share: one pooled client per event loop, SSE parsing, error mapping.

Every failure leaves here as one `AppError("upstream_error", status=502)` whose message names the provider
and carries the upstream's own words, with the API key scrubbed out.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from agentsite.errors import AppError

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
        entry = _clients[loop] = (client, _closed_with_the_loop(client))
    return entry[0]


def _closed_with_the_loop(client: httpx.AsyncClient) -> AsyncIterator[None]:
    """A started async generator that closes the client when it is closed. asyncio.run(), asgiref's
    async_to_sync and pytest-asyncio close every live async generator of a loop before closing the loop,
    which is the only end-of-loop hook asyncio offers; so the pool's sockets close cleanly with their loop.
    """

    async def close_at_shutdown() -> AsyncIterator[None]:
        try:
            yield
        finally:
            _clients.pop(asyncio.get_running_loop(), None)
            await client.aclose()

    generator = close_at_shutdown()
    try:
        generator.__anext__().send(None)  # runs it to its yield at once; that registers it with the loop
    except StopIteration:
        pass
    return generator


@dataclass
class Upstream:
    """One provider's endpoint: who it is (for messages), where, with which headers, and the key to scrub."""

    provider: str
    url: str
    headers: dict[str, str] = field(repr=False)
    api_key: str = field(default="", repr=False)
    timeout: float = 120.0

    def error(self, message: str, *, status: int | None = None) -> AppError:
        text = scrub(message, self.api_key)[:MAX_MESSAGE_CHARS]
        where = f"The LLM provider ({self.provider})"
        sentence = f"{where} answered {status}: {text}" if status else f"{where} failed: {text}"
        details: dict[str, Any] = {"provider": self.provider}
        if status:
            details["status"] = status
        logger.warning("%s", sentence)
        return AppError("upstream_error", sentence, status=502, details=details)

    def httpx_timeout(self) -> httpx.Timeout:
        return httpx.Timeout(self.timeout, connect=min(self.timeout, CONNECT_TIMEOUT))


def scrub(text: str, secret: str) -> str:
    return text.replace(secret, "[redacted]") if secret else text


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


def transport_error(upstream: Upstream, exc: httpx.HTTPError) -> AppError:
    if isinstance(exc, httpx.TimeoutException):
        return upstream.error(f"no answer from {upstream.url} within {upstream.timeout:g} s ({type(exc).__name__}).")
    if isinstance(exc, httpx.ConnectError):
        return upstream.error(f"could not connect to {upstream.url}: {exc or type(exc).__name__}.")
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        return upstream.error(f"the connection broke before the reply was complete ({exc or type(exc).__name__}).")
    return upstream.error(f"{type(exc).__name__}: {exc}")


async def post_json(upstream: Upstream, body: dict[str, Any]) -> dict[str, Any]:
    """POST a JSON body and return the JSON reply; raises the upstream AppError."""
    try:
        response = await shared_client().post(upstream.url, json=body, headers=upstream.headers,
                                              timeout=upstream.httpx_timeout())
    except httpx.HTTPError as exc:
        raise transport_error(upstream, exc) from None
    if response.status_code >= 400:
        raise upstream.error(error_text(response.content), status=response.status_code)
    try:
        data = response.json()
    except ValueError:
        raise upstream.error(f"the reply was not JSON: {response.text[:200]!r}") from None
    if not isinstance(data, dict):
        raise upstream.error("the reply was not a JSON object.")
    return data


@dataclass(frozen=True)
class SseEvent:
    event: str
    data: str


async def stream_sse(upstream: Upstream, body: dict[str, Any]) -> AsyncIterator[SseEvent]:
    """POST a JSON body and yield the reply's server-sent events; raises the upstream AppError.

    Leaving the generator early (a cancelled consumer, aclose()) closes the response, and with it the
    connection, since httpx does not return a half-read connection to its pool.
    """
    request = shared_client().build_request("POST", upstream.url, json=body, headers=upstream.headers,
                                            timeout=upstream.httpx_timeout())
    try:
        response = await shared_client().send(request, stream=True)
    except httpx.HTTPError as exc:
        raise transport_error(upstream, exc) from None
    try:
        if response.status_code >= 400:
            raise upstream.error(error_text(await _read_capped(response)), status=response.status_code)
        async for event in parse_sse(response.aiter_lines()):
            yield event
    except httpx.HTTPError as exc:
        raise transport_error(upstream, exc) from None
    finally:
        await response.aclose()


async def _read_capped(response: httpx.Response) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) >= MAX_ERROR_BODY:
            break
    return bytes(body)


async def parse_sse(lines: AsyncIterator[str]) -> AsyncIterator[SseEvent]:
    """Server-sent events from text lines (the WHATWG rules: blank line ends an event, ':' is a comment)."""
    event, data = "", []
    async for line in lines:
        if not line:
            if data:
                yield SseEvent(event or "message", "\n".join(data))
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
    if data:  # a stream that ends without the final blank line still delivers its last event
        yield SseEvent(event or "message", "\n".join(data))

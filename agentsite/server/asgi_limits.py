"""ASGI wrapper in front of every app (Django, MCP): the Host check, the body limit, chunked and deep-JSON
bodies, and the security headers.

It sits outside Django so that it also covers the mounted MCP apps. Under daphne the body is
refused even earlier, while it arrives (install_daphne_body_limit below), because Twisted would
otherwise store all of it before the app sees any.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

from django.conf import settings

from agentsite.core.bodygate import body_limit_for, gate_for
from agentsite.core.errors import AppError, envelope_for
from agentsite.core.hosts import scope_host_allowed
from agentsite.core.jsonbody import MAX_JSON_DEPTH, json_too_deep

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# Every answer carries these, Django's (agentsite.middleware) and those sent before Django runs (here).
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "X-XSS-Protection": "1; mode=block",
    "Referrer-Policy": "same-origin",
}

_HEADER_PAIRS = [(name.lower().encode(), value.encode()) for name, value in SECURITY_HEADERS.items()]
# AGENTSITE_WORKER_HEADER (a debug aid, off by default): every answer names the process and the host that served
# it, so that one can see how `serve --workers N`, or a proxy in front of several hosts, spreads requests
# (docs/deploying.md). Pids alone repeat across containers, each of which numbers its own from 1.
WORKER_HEADER = "X-Agentsite-Worker"
HOST_HEADER = "X-Agentsite-Host"


def _name_this_process() -> None:
    """The worker header's pid is this process's: set again in a child forked after this module was imported
    (serve forks its workers from itself, os.register_at_fork below)."""
    if not getattr(settings, "AGENTSITE_WORKER_HEADER", False):
        return
    _HEADER_PAIRS[:] = [pair for pair in _HEADER_PAIRS if pair[0] not in (WORKER_HEADER.lower().encode(),
                                                                          HOST_HEADER.lower().encode())]
    _HEADER_PAIRS.append((WORKER_HEADER.lower().encode(), str(os.getpid()).encode()))
    _HEADER_PAIRS.append((HOST_HEADER.lower().encode(), socket.gethostname().encode("ascii", "replace")))


_name_this_process()
os.register_at_fork(after_in_child=_name_this_process)


def _with_security_headers(headers: list) -> list:
    present = {name.lower() for name, _ in headers}
    return list(headers) + [(name, value) for name, value in _HEADER_PAIRS if name not in present]


def _error_body(path: str, code: str, message: str, status: int) -> bytes:
    return json.dumps(envelope_for(path, code, message, status)).encode()


def _too_large_body(path: str, limit: int | None = None) -> bytes:
    limit_mb = f"{(limit or body_limit_for(path)) / (1024 * 1024):.1f}".removesuffix(".0")
    return _error_body(path, "payload_too_large", f"The request body is larger than {limit_mb} MB.", 413)


class BodyLimitExceeded(Exception):
    pass


class ClientGone(Exception):
    pass


class LimitsMiddleware:
    def __init__(self, app, max_body: int | None = None):
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket" and not scope_host_allowed(scope):
            return await send({"type": "websocket.close"})  # the handshake is refused (403), as for any path
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        send = _SecuredSend(send)
        path = scope.get("path", "")
        # First, before auth and before a byte of the body is read: a rebound DNS name gets nothing.
        if not scope_host_allowed(scope):
            return await _answer(send, 400, _error_body(
                path, "invalid_host", "The Host header names a host this server does not serve.", 400))
        limit = self.max_body or body_limit_for(path)
        length = _content_length(scope)
        if length is not None and length > limit:
            return await _answer(send, 413, _too_large_body(path, limit), close=True)
        gate = gate_for(path, scope.get("method", ""))
        refusal = await gate(scope) if gate is not None else None
        if refusal is not None:  # before a byte of the body is read: an unauthenticated 10 MB body costs nothing
            return await _answer(send, refusal.status, _error_body(path, refusal.code, refusal.message,
                                                                   refusal.status), close=True,
                                 headers=_refusal_headers(refusal))
        if length is not None and not _is_json(scope):
            return await self._pass_counting(scope, receive, send, limit)
        try:
            body = await _read_body(receive, limit)
        except BodyLimitExceeded:
            return await _answer(send, 413, _too_large_body(path, limit), close=True)
        except ClientGone:
            return None
        if _is_json(scope) and json_too_deep(body):
            return await _answer(send, 400, _error_body(
                path, "invalid", f"The JSON body nests deeper than {MAX_JSON_DEPTH} levels.", 400))
        if length is None:
            scope = _with_content_length(scope, len(body))
        await self.app(scope, _replaying(body, receive), send)

    async def _pass_counting(self, scope: Scope, receive: Receive, send: _SecuredSend, limit: int) -> None:
        """A declared-length body the wrapper need not look at (an upload): streamed through, counted."""
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyLimitExceeded
            return message

        try:
            await self.app(scope, counting_receive, send)
        except BodyLimitExceeded:
            if not send.started:
                await _answer(send, 413, _too_large_body(scope.get("path", ""), limit), close=True)


class _SecuredSend:
    """`send` with the security headers added to the response start; `started` says whether one went out."""

    def __init__(self, send: Send):
        self.send = send
        self.started = False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            if self.started:
                return
            self.started = True
            message = {**message, "headers": _with_security_headers(message.get("headers", []))}
        await self.send(message)


def _refusal_headers(refusal: AppError) -> list[tuple[bytes, bytes]]:
    headers = dict(refusal.headers)
    if refusal.status == 401:
        headers.setdefault("WWW-Authenticate", 'Bearer realm="v1"')
    return [(name.lower().encode(), value.encode()) for name, value in headers.items()]


async def _answer(send: Send, status: int, body: bytes, close: bool = False,
                  headers: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               *(headers or [])]
    if close:  # the rest of an over-size body is not read: the connection cannot carry another request
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _read_body(receive: Receive, limit: int) -> bytes:
    """The whole body (Django reads all of it before the view anyway); raises BodyLimitExceeded, ClientGone."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        part = message.get("body", b"")
        size += len(part)
        if size > limit:
            raise BodyLimitExceeded
        parts.append(part)
        if not message.get("more_body", False):
            return b"".join(parts)


def _replaying(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the app the buffered body, then the server's own messages (a disconnect)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


def _with_content_length(scope: Scope, length: int) -> Scope:
    # Django (and DRF) read a body only up to Content-Length, so a chunked one read as empty: it now has one.
    headers = [(name, value) for name, value in scope.get("headers", [])
               if name.lower() not in (b"content-length", b"transfer-encoding")]
    return {**scope, "headers": [*headers, (b"content-length", str(length).encode())]}


def _is_json(scope: Scope) -> bool:
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-type":
            media = value.split(b";", 1)[0].strip().lower()
            return media == b"application/json" or media.endswith(b"+json")
    return False


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


# --- inside daphne ----------------------------------------------------------------------------------
# Twisted buffers a whole request body (to a temp file when large) before daphne hands the request to
# the ASGI app, so the wrapper above only sees a body after it was stored. These hooks refuse it while
# it arrives: the 413 goes out at once, the rest is discarded (not stored), and a client that goes on
# sending past DISCARD_CAP is cut off.
#
# daphne and Twisted also answer some requests themselves, without the ASGI app (a path or query that is
# not ASCII, a malformed request line or header, daphne's own 500/503): the hooks below give those
# answers the security headers too. Twisted would also parse every multipart/form-data POST itself (in
# memory) and answer a bare 400 when it has no boundary; that parsing is switched off, since Django
# parses uploads itself.
DISCARD_CAP = 64 * 1024 * 1024


def install_daphne_body_limit(limit: int | None = None) -> bool:
    """Patch daphne's request and Twisted's channel once; returns False when daphne is not installed."""
    try:
        # Only under daphne: patched when its server starts (and daphne may be missing: False).
        from daphne.http_protocol import WebRequest
        from twisted.web.http import HTTPChannel
    except ImportError:
        return False
    if getattr(WebRequest, "_agentsite_body_limit", None) is not None:
        return True
    WebRequest._agentsite_body_limit = limit or settings.MAX_BODY_BYTES
    _install_body_limit(WebRequest)
    _install_daphne_headers(WebRequest, HTTPChannel)
    return True


def _install_body_limit(request_class: type) -> None:
    original_got_length = request_class.gotLength
    original_chunk = request_class.handleContentChunk
    original_process = request_class.process

    def got_length(self, length):
        self._agentsite_received = 0
        self._agentsite_refused = False
        self._parsePOSTFormSubmission = False  # Django parses forms; Twisted's own parse is a bare 400 or waste
        # The path is known here (the request line came first): a path with a limit of its own keeps it.
        path = _channel_path(self)
        own = getattr(settings, "MAX_BODY_BYTES_BY_PATH", {}).get(path)
        self._agentsite_body_limit = max(type(self)._agentsite_body_limit, own or 0)
        original_got_length(self, length)
        if length is not None and length > self._agentsite_body_limit:
            _refuse_in_daphne(self)

    def handle_content_chunk(self, data):
        self._agentsite_received = getattr(self, "_agentsite_received", 0) + len(data)
        if getattr(self, "_agentsite_refused", False):
            if self._agentsite_received > self._agentsite_body_limit + DISCARD_CAP:
                self.channel.transport.abortConnection()
            return
        if self._agentsite_received > self._agentsite_body_limit:
            _refuse_in_daphne(self)
            return
        original_chunk(self, data)

    def process(self):
        if getattr(self, "_agentsite_refused", False):
            self.channel.transport.loseConnection()
            return None
        return original_process(self)

    request_class.gotLength = got_length
    request_class.handleContentChunk = handle_content_chunk
    request_class.process = process


def _install_daphne_headers(request_class: type, channel_class: type) -> None:
    original_reply = request_class.handle_reply

    def handle_reply(self, message):
        # daphne's basic_error (bad path, bad query string, its own 500 and 503) starts its reply here.
        if message.get("type") == "http.response.start":
            message = {**message, "headers": _with_security_headers(message.get("headers", []))}
        if message.get("type") != "http.response.body" or not message.get("more_body"):
            return original_reply(self, message)
        transport = _idle_transport(self)
        if transport is None:
            result = original_reply(self, message)
            _flush(self)
            return result
        # A streamed chunk on a connection with nothing pending goes to the socket here (_send_now): its write
        # does not register the socket with the reactor first only to deregister it at once.
        transport.startWriting = _not_yet
        try:
            result = original_reply(self, message)
        finally:
            del transport.startWriting
        _send_now(transport)
        return result

    def respond_to_bad_request_and_disconnect(self):
        # Twisted's answer to a request it cannot parse (request line, header, chunk framing), headers added.
        self.transport.write(b"\r\n".join([b"HTTP/1.1 400 Bad Request", *_raw_security_headers(),
                                             b"Content-Length: 0", b"Connection: close"]) + b"\r\n\r\n")
        self.loseConnection()

    original_connection_made = channel_class.connectionMade

    def connection_made(self):
        original_connection_made(self)
        # Nagle off, as uvicorn and asyncio servers have it: a streamed event written while the previous one
        # is unacknowledged would otherwise wait for that ACK (a round trip, or a delayed ACK's 40 ms).
        set_no_delay = getattr(self.transport, "setTcpNoDelay", None)
        if set_no_delay is not None:
            set_no_delay(True)

    request_class.handle_reply = handle_reply
    channel_class._respondToBadRequestAndDisconnect = respond_to_bad_request_and_disconnect
    channel_class.connectionMade = connection_made
    _install_header_limit(channel_class)
    _install_websocket_headers()


def _install_header_limit(channel_class: type) -> None:
    """Twisted's limits on a request's head (`totalHeadersSize`, 16,384 bytes: the request line and the header
    lines, CRLFs not counted; `maxHeaders`, 500) answered a bare 400, and a single line past 16,384 bytes
    (LineReceiver's MAX_LENGTH) was dropped without any answer. All three now answer 431 in the path's envelope."""
    original_line = channel_class.lineReceived
    original_header = channel_class.headerReceived

    def line_received(self, line):
        if self._receivedHeaderSize + len(line) > self.totalHeadersSize:
            return _refuse_headers(self)
        return original_line(self, line)

    def line_length_exceeded(self, line):
        return _refuse_headers(self)

    def header_received(self, line):
        if self._receivedHeaderCount >= self.maxHeaders:
            _refuse_headers(self)
            return False
        return original_header(self, line)

    channel_class.lineReceived = line_received
    channel_class.lineLengthExceeded = line_length_exceeded
    channel_class.headerReceived = header_received


def _refuse_headers(channel) -> None:
    # The path of the request line read for this request: none yet when the request line is the long one (the
    # channel's `_path` would then be the previous request's on a kept-alive connection).
    parsed = not getattr(channel, "_HTTPChannel__first_line", 0)
    raw = (getattr(channel, "_path", b"") or b"").split(b"?", 1)[0] if parsed else b""
    path = unquote(raw.decode("latin-1"), encoding="utf-8", errors="replace")
    body = _error_body(path, "headers_too_large", "The request line and headers are over 16,384 bytes (or there "
                       "are more than 500 headers).", 431)
    head = [b"HTTP/1.1 431 Request Header Fields Too Large", b"Content-Type: application/json",
            b"Content-Length: " + str(len(body)).encode(), b"Connection: close", *_raw_security_headers()]
    channel.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
    channel.loseConnection()


def _not_yet() -> None:
    """A transport's startWriting while _send_now is about to send what is written."""


def _idle_transport(request):
    """The request's plain TCP transport when connected with nothing waiting to be sent (so not registered with
    the reactor for writing), else None."""
    transport = getattr(getattr(request, "channel", None), "transport", None)
    if (transport is None or not getattr(transport, "connected", False) or getattr(transport, "TLS", False)
            or getattr(transport, "disconnecting", True) or "startWriting" in vars(transport)):
        return None
    if getattr(transport, "_tempDataBuffer", True) or getattr(transport, "dataBuffer", True):
        return None
    return transport


def _send_now(transport) -> None:
    """Send what was just written to an idle transport (_idle_transport), registering it with the reactor only
    when the socket did not take it all or the write failed: the reactor then sends the rest, or sees the
    failure, as it would have."""
    failed = transport.doWrite()
    if failed is not None or transport._tempDataBuffer or transport.dataBuffer:
        transport.startWriting()


def _flush(request) -> None:
    """Send a streamed body's chunk to the socket now. Twisted's transport only buffers on write and sends when
    the event loop next polls the socket (an epoll registration, a loop turn and a deregistration per chunk):
    a stream produced in a burst left in one piece at the end of the burst, and each event cost a loop turn.
    `doWrite` is what the reactor itself calls when the socket is writable; on a full socket it writes
    nothing and the transport stays registered, as before."""
    transport = getattr(getattr(request, "channel", None), "transport", None)
    if transport is None or not getattr(transport, "connected", False):
        return
    if getattr(transport, "_tempDataBuffer", None) or getattr(transport, "dataBuffer", None):
        transport.doWrite()


def _install_websocket_headers() -> None:
    """A WebSocket upgrade is answered by autobahn (daphne's WebSocket layer): its refusals get the headers too."""
    try:
        # Only under daphne: patched when its server starts, not by every process that imports this module.
        from autobahn.websocket.protocol import WebSocketServerProtocol
    except ImportError:
        return
    original_error = WebSocketServerProtocol.sendHttpErrorResponse

    def send_http_error_response(self, code, reason, responseHeaders=None):  # noqa: N803 - autobahn's name
        headers = [*(responseHeaders or []), *((name, value) for name, value in SECURITY_HEADERS.items())]
        return original_error(self, code, reason, headers)

    WebSocketServerProtocol.sendHttpErrorResponse = send_http_error_response


def _raw_security_headers() -> list[bytes]:
    return [name.title() + b": " + value for name, value in _HEADER_PAIRS]


def _channel_path(request) -> str:
    """The request's path as the ASGI scope will have it (percent-decoded, no query string)."""
    raw = (getattr(request.channel, "_path", b"") or b"").split(b"?", 1)[0]
    return unquote(raw.decode("latin-1"), encoding="utf-8", errors="replace")


def _refuse_in_daphne(request) -> None:
    request._agentsite_refused = True
    path = _channel_path(request)
    body = _too_large_body(path, request._agentsite_body_limit)
    head = [b"HTTP/1.1 413 Payload Too Large", b"Content-Type: application/json",
            b"Content-Length: " + str(len(body)).encode(), b"Connection: close", *_raw_security_headers()]
    request.channel.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)

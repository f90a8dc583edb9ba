"""ASGI wrapper in front of every app (Django, MCP): body size limit and security headers.

It sits outside Django so that it also covers the mounted MCP apps. Under daphne the body is
refused even earlier, while it arrives (install_daphne_body_limit below), because Twisted would
otherwise store all of it before the app sees any.
"""

from __future__ import annotations

import json

from django.conf import settings

from agentsite.middleware import SECURITY_HEADERS

_HEADER_PAIRS = [(name.lower().encode(), value.encode()) for name, value in SECURITY_HEADERS.items()]


def _with_security_headers(headers: list) -> list:
    present = {name.lower() for name, _ in headers}
    return list(headers) + [(name, value) for name, value in _HEADER_PAIRS if name not in present]


def _too_large_body(path: str) -> bytes:
    limit_mb = settings.MAX_BODY_BYTES // (1024 * 1024)
    message = f"The request body is larger than {limit_mb} MB."
    if path.startswith("/v1"):
        error = {"message": message, "type": "invalid_request_error", "param": None, "code": "payload_too_large"}
        return json.dumps({"error": error}).encode()
    return json.dumps({"error": {"code": "payload_too_large", "message": message, "details": {}}}).encode()


class BodyLimitExceeded(Exception):
    pass


class LimitsMiddleware:
    def __init__(self, app, max_body: int | None = None):
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.max_body or settings.MAX_BODY_BYTES
        started = False

        async def send_with_headers(message):
            nonlocal started
            if message["type"] == "http.response.start":
                if started:
                    return
                started = True
                message = {**message, "headers": _with_security_headers(message.get("headers", []))}
            await send(message)

        length = _content_length(scope)
        if length is not None and length > limit:
            return await self._refuse(scope, send_with_headers)

        received = 0

        async def counting_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyLimitExceeded
            return message

        try:
            await self.app(scope, counting_receive, send_with_headers)
        except BodyLimitExceeded:
            if not started:
                await self._refuse(scope, send_with_headers)

    async def _refuse(self, scope, send):
        body = _too_large_body(scope.get("path", ""))
        await send({"type": "http.response.start", "status": 413, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def _content_length(scope) -> int | None:
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
DISCARD_CAP = 64 * 1024 * 1024


def install_daphne_body_limit(limit: int | None = None) -> bool:
    """Patch daphne's request class once; returns False when daphne is not installed."""
    try:
        from daphne.http_protocol import WebRequest
    except ImportError:
        return False
    if getattr(WebRequest, "_agentsite_body_limit", None) is not None:
        return True
    WebRequest._agentsite_body_limit = limit or settings.MAX_BODY_BYTES
    original_got_length = WebRequest.gotLength
    original_chunk = WebRequest.handleContentChunk
    original_process = WebRequest.process

    def got_length(self, length):
        self._agentsite_received = 0
        self._agentsite_refused = False
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

    WebRequest.gotLength = got_length
    WebRequest.handleContentChunk = handle_content_chunk
    WebRequest.process = process
    return True


def _refuse_in_daphne(request) -> None:
    request._agentsite_refused = True
    path = (getattr(request.channel, "_path", b"") or b"").decode("latin-1").split("?", 1)[0]
    body = _too_large_body(path)
    head = [b"HTTP/1.1 413 Payload Too Large", b"Content-Type: application/json",
            b"Content-Length: " + str(len(body)).encode(), b"Connection: close"]
    head += [name.title() + b": " + value for name, value in _HEADER_PAIRS]
    request.channel.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)

"""ASGI wrapper in front of every app (Django, MCP): body size limit and security headers.

It sits outside Django so that it also covers the mounted MCP apps, and so a chunked body is
cut off while it streams in, before anything buffers 10 MB of it.
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

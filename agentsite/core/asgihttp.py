"""HTTP for the ASGI apps mounted next to Django (/mcp, /a2a): what Django's middleware would do for a view, done
on a raw ASGI request. Headers read by name, the request's origin as the client addressed it, the API's CORS
policy (django-cors-headers' settings) on every answer and on preflights, and answers in the API's JSON
envelope. A mounted app checks the Host first (hosts.scope_host_allowed), then the Origin, then its credential.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from django.conf import settings

from agentsite.core.cors import origin_allowed
from agentsite.core.errors import envelope
from agentsite.core.hosts import host_allowed, scope_host_allowed

Scope = dict[str, Any]
Send = Callable[[dict[str, Any]], Any]
Headers = list[tuple[bytes, bytes]]


def header(scope: Scope, name: bytes) -> str | None:
    """The value of header `name` (lower-case bytes), or None."""
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def origin_is_own_host(origin: str) -> bool:
    """Whether an Origin names a host this server serves (a page of its own, such as the dashboard)."""
    return host_allowed(re.sub(r"^[a-z][a-z0-9+.-]*://", "", origin, flags=re.IGNORECASE))


def request_origin(scope: Scope) -> str:
    """scheme://host of the request, as the client addressed it (the Host header; the scheme of the connection,
    or https when SECURE_PROXY_SSL_HEADER names a header that says so)."""
    scheme = scope.get("scheme", "http")
    proxy = settings.SECURE_PROXY_SSL_HEADER
    if proxy and header(scope, proxy[0].removeprefix("HTTP_").replace("_", "-").lower().encode()) == proxy[1]:
        scheme = "https"
    return f"{scheme}://{header(scope, b'host') or ''}".lower()


async def admitted(scope: Scope, send: Send, *, expose: bytes, methods: bytes, default_headers: str) -> Send | None:
    """A mounted app's first step: the `send` to answer with (the API's CORS policy applied, which Django's
    middleware cannot apply here), or None when this already answered: a Host this server does not serve (400
    `invalid_host`; the ASGI wrapper checks it first on every path, again here so that the app never serves a
    foreign Host wherever it is mounted), a CORS preflight, or an Origin neither allowed nor the server's own
    (403 `forbidden`)."""
    origin = header(scope, b"origin")
    allowed_origin = origin if origin and origin_allowed(origin) else None
    send = with_cors(send, allowed_origin, expose)
    if not scope_host_allowed(scope):
        await error(send, 400, "invalid_host", "The Host header names a host this server does not serve.")
        return None
    if scope["method"] == "OPTIONS" and header(scope, b"access-control-request-method"):
        await preflight(scope, send, allowed_origin, methods=methods, default_headers=default_headers)
        return None
    if origin and not allowed_origin and not origin_is_own_host(origin):
        await error(send, 403, "forbidden", "Requests from this Origin are not allowed.")
        return None
    return send


def with_cors(send: Send, origin: str | None, expose: bytes) -> Send:
    """`send` with the CORS headers for an allowed `origin` on the response (None: unchanged)."""
    if origin is None:
        return send

    async def send_with_cors(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []),
                                              (b"access-control-allow-origin", origin.encode("latin-1")),
                                              (b"access-control-expose-headers", expose), (b"vary", b"Origin")]}
        await send(message)

    return send_with_cors


async def preflight(scope: Scope, send: Send, origin: str | None, *, methods: bytes, default_headers: str) -> None:
    """The answer to a CORS preflight: 204 with what an allowed origin may send, else 403 `forbidden`."""
    if origin is None:
        return await error(send, 403, "forbidden", "Requests from this Origin are not allowed.")
    requested = header(scope, b"access-control-request-headers") or default_headers
    await send({"type": "http.response.start", "status": 204, "headers": [
        (b"access-control-allow-methods", methods),
        (b"access-control-allow-headers", requested.encode("latin-1")), (b"access-control-max-age", b"86400")]})
    await send({"type": "http.response.body", "body": b""})


async def json_response(send: Send, status: int, payload: Any, headers: Headers | None = None) -> None:
    body = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


async def error(send: Send, status: int, code: str, message: str, headers: Headers | None = None) -> None:
    """An answer in the API's error envelope."""
    await json_response(send, status, envelope(code, message), headers)

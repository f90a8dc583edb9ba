"""The one Host check (docs/api.md: Hosts), shared by the ASGI wrapper and the MCP app.

A web page can rebind its own DNS name to 127.0.0.1 and then call this server from the browser as a
"same-origin" page; the Host header it sends still names the attacker's domain, so refusing unknown
hosts on every path (public /v1 and open registration included) defeats it. The matching is Django's
own (`validate_host`: case, a trailing dot, `.example.com` wildcards, `*`), so /admin and /api agree.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http.request import split_domain_port, validate_host


def allowed_hosts() -> list[str]:
    hosts = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not hosts:
        hosts = [".localhost", "127.0.0.1", "[::1]"]  # what Django itself allows in that case
    return hosts


def host_allowed(host: str | None) -> bool:
    """Whether a `Host` header value (`name[:port]`) names this server."""
    if not host:
        return False
    domain, _port = split_domain_port(host)
    return bool(domain) and validate_host(domain, allowed_hosts())


def scope_host(scope: dict[str, Any]) -> str | None:
    """The host an ASGI request names, as Django's `HttpRequest.get_host()` finds it."""
    for name, value in scope.get("headers", []):
        if name.lower() == b"host":
            return value.decode("latin-1")
    server = scope.get("server")
    if server and server[0]:  # no Host header at all (HTTP/1.0): Django falls back to SERVER_NAME
        return str(server[0]) if server[1] in (None, 80, 443) else f"{server[0]}:{server[1]}"
    return None


def scope_host_allowed(scope: dict[str, Any]) -> bool:
    """Whether an ASGI request's host is one of AGENTSITE_ALLOWED_HOSTS (the check /mcp and the wrapper share)."""
    return host_allowed(scope_host(scope))

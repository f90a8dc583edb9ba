"""The protected resources this server issues tokens for, each named by its absolute URL (RFC 8707, RFC 9728): the
MCP endpoint `<origin>/mcp` and the A2A endpoints `<origin>/a2a` (one resource for every agent's `/a2a/<slug>`).
The URL is the one the client typed, read off the request (scheme and Host), so a deployment behind a proxy that
keeps the Host and sets X-Forwarded-Proto (SECURE_PROXY_SSL_HEADER) names itself as its users reach it.

Invariant: a resource has exactly one scope, and a token carries the scope of the one resource it was issued for
(oauth.server grants no other); its audience is that resource only (oauth.tokens).
"""

from __future__ import annotations

from typing import NamedTuple
from urllib.parse import urlsplit

# The paths of the resources (mcpbridge.paths serves /mcp there; the A2A door serves /a2a/<slug> under A2A_PATH).
MCP_PATH = "/mcp"
A2A_PATH = "/a2a"
METADATA_PATH = "/.well-known/oauth-protected-resource"


class ProtectedResource(NamedTuple):
    """A resource this server protects: its path on the origin, the one scope its tokens carry, the name its
    metadata gives it, and what the consent page says the scope allows."""

    path: str
    scope: str
    name: str
    allows: str

    def url(self, origin: str) -> str:
        """The resource's identifier on `origin` (scheme://host[:port])."""
        return origin + self.path

    def metadata_url(self, origin: str) -> str:
        """Where its RFC 9728 metadata is on `origin` (the URL a 401's WWW-Authenticate names)."""
        return origin + METADATA_PATH + self.path


MCP = ProtectedResource(MCP_PATH, "mcp", "agentsite MCP",
                        "Use agentsite's MCP server as you: your tools, knowledge base and agents.")
A2A = ProtectedResource(A2A_PATH, "a2a", "agentsite A2A",
                        "Use your agents over A2A as you: send them messages and tasks, read their answers.")
RESOURCES = (MCP, A2A)
SCOPES = tuple(resource.scope for resource in RESOURCES)


def origin_of(url: str) -> str:
    """scheme://host[:port] of an absolute URL, lower-cased."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def resource_url(origin: str) -> str:
    """The MCP endpoint's URL on `origin` (its resource's identifier)."""
    return MCP.url(origin)


def a2a_resource_url(origin: str) -> str:
    """The A2A endpoints' resource identifier on `origin`: one for every agent's /a2a/<slug>."""
    return A2A.url(origin)


def a2a_metadata_url(origin: str) -> str:
    """The A2A resource's RFC 9728 metadata URL on `origin`."""
    return A2A.metadata_url(origin)


def resource_canonical(resource: str) -> str:
    """A resource URL as it is stored and compared: scheme and host lower-cased, no trailing slash (a door checks
    the request's lower-cased origin + its resource path against it)."""
    parts = urlsplit(resource)
    return origin_of(resource) + parts.path.rstrip("/")


def resource_named(resource: str, request_url: str) -> ProtectedResource | None:
    """The protected resource `resource` names on the origin `request_url` was made to (a trailing slash and case
    aside), or None when it names none. No query or fragment (RFC 8707)."""
    parts = urlsplit(resource)
    if parts.query or parts.fragment or parts.scheme not in ("http", "https"):
        return None
    wanted, origin = resource.rstrip("/").lower(), origin_of(request_url)
    return next((known for known in RESOURCES if known.url(origin).lower() == wanted), None)


def bearer_challenge(metadata_url: str, scope: str, *, status: int, presented: bool) -> str:
    """The WWW-Authenticate header of a refusal at a protected resource (RFC 6750 §3, RFC 9728 §5.1): where its
    metadata is, the scope needed, and for a presented credential the error (invalid_token for a 401,
    insufficient_scope for a 403)."""
    parts = [f'resource_metadata="{metadata_url}"', f'scope="{scope}"']
    kind = {401: "invalid_token", 403: "insufficient_scope"}.get(status)
    if kind and presented:
        parts.append(f'error="{kind}"')
    return "Bearer " + ", ".join(parts)

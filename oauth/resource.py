"""The protected resource: this server's MCP endpoint, named by its absolute URL (RFC 8707, RFC 9728). The URL
is the one the client typed, read off the request (scheme and Host), so a deployment behind a proxy that keeps
the Host and sets X-Forwarded-Proto (SECURE_PROXY_SSL_HEADER) names itself as its users reach it."""

from __future__ import annotations

from urllib.parse import urlsplit

# The path of the one resource this server protects (mcpbridge.paths serves it there).
MCP_PATH = "/mcp"
METADATA_PATH = "/.well-known/oauth-protected-resource"


def origin_of(url: str) -> str:
    """scheme://host[:port] of an absolute URL, lower-cased."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def resource_url(origin: str) -> str:
    """The MCP endpoint's URL on `origin` (the resource's identifier)."""
    return origin + MCP_PATH


def resource_canonical(resource: str) -> str:
    """A resource URL as it is stored and compared: scheme and host lower-cased, no trailing slash (the MCP
    endpoint's resource checks the request's lower-cased origin + /mcp against it)."""
    parts = urlsplit(resource)
    return origin_of(resource) + parts.path.rstrip("/")


def resource_matches(resource: str, request_url: str) -> bool:
    """Whether `resource` names the MCP endpoint of the origin `request_url` was made to (a trailing slash aside).
    No query or fragment (RFC 8707)."""
    parts = urlsplit(resource)
    if parts.query or parts.fragment or parts.scheme not in ("http", "https"):
        return False
    return resource.rstrip("/").lower() == resource_url(origin_of(request_url)).lower()

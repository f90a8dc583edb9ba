"""The one HTTP client for remote A2A agents: every request (the card, each JSON-RPC call, a stream) passes the
private-address guard (agentsite.agent.builtin.netguard, as web_fetch and MCP URL servers) and goes to the
address that was checked; no redirect is followed and no proxy from the environment is used.
"""

from __future__ import annotations

import httpx

from agentsite.agent.builtin.web_fetch import default_policy
from agentsite.agent.tooltypes import ToolError


class RemoteRefused(ToolError):
    """The guard refused a URL (a private or loopback address while those are off, a name that does not resolve,
    a scheme other than http(s)); the message says why and names AGENTSITE_ALLOW_PRIVATE_FETCH."""


async def url_pinned(url: httpx.URL) -> str:
    """The checked address to connect to for this URL. Raises RemoteRefused."""
    if url.scheme not in ("http", "https") or not url.host:
        raise RemoteRefused(f"Refusing to fetch {url}: a remote agent is reached over http(s) at a host.")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        return await default_policy().pin(url.host, port)
    except ToolError as exc:
        raise RemoteRefused(str(exc)) from None


async def _guard(request: httpx.Request) -> None:
    url = request.url
    address = await url_pinned(url)
    # The request goes to the address just checked: a second lookup could answer another (DNS rebinding). The
    # name stays in the Host header and in TLS (SNI and the certificate check).
    request.headers["Host"] = url.netloc.decode("ascii")
    if url.scheme == "https":
        request.extensions = {**request.extensions, "sni_hostname": url.host}
    request.url = url.copy_with(host=address)


def guarded_client(*, headers: dict[str, str], timeout: float) -> httpx.AsyncClient:
    """An HTTP client sending `headers` with every request, each request guarded; the caller closes it."""
    return httpx.AsyncClient(headers=headers, timeout=timeout, follow_redirects=False, trust_env=False,
                             event_hooks={"request": [_guard]})

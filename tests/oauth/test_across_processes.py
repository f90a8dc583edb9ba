"""The whole OAuth flow with each step answered by another process than the one before: registration,
authorization, the consent (through the dashboard's API, with a dashboard sign-in), the token exchange, /mcp,
refresh, reuse detection and revocation; and the official MCP SDK's OAuth client (OAuthClientProvider) doing
discovery from the 401, registration, PKCE, the exchange, list_tools, call_tool and a refresh.

One deployment for the module, as tests/foundation/test_stateful_doors.py runs it: on SQLite one `serve` with
its default workers; on PostgreSQL + Redis two `serve` hosts (tests/server.py TwoHosts). Every answer names its
process (AGENTSITE_WORKER_HEADER), and each step is sent through a keep-alive connection pinned to a chosen
process and checked against the header. Requests keep the first host's Host header whichever host they reach,
as behind a load balancer: the resource (the audience) is the URL the client typed.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx2
import pytest
import requests
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from agentsite.server.serve import default_workers
from tests.e2e import WORKER_HEADER, PinnedProcesses
from tests.server import LiveServer, TwoHosts, two_hosts_possible

pytestmark = pytest.mark.e2e

HEADER = WORKER_HEADER
REDIRECT = "http://127.0.0.1:33418/callback"
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


class Deployment(PinnedProcesses):
    """The servers of one deployment, a keep-alive connection pinned to each of their processes, and the Host
    every request names (the first server's, as a load balancer's name would be)."""

    def __init__(self, servers: tuple[LiveServer, ...], admin_token: str) -> None:
        self.admin_token = admin_token
        self.origin = servers[0].base_url
        super().__init__(servers, host=urlsplit(servers[0].base_url).netloc)

    def via(self, pid: int, method: str, path: str, *, headers: dict | None = None, **kwargs) -> requests.Response:
        """A request answered by process `pid`, its redirects not followed; fails if another process answered."""
        kwargs.setdefault("allow_redirects", False)
        return super().via(pid, method, path, headers=headers, **kwargs)

    @property
    def dashboard(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_token}"}


@pytest.fixture(scope="module")
def deployment() -> Iterator[Deployment]:
    env = {"AGENTSITE_WORKER_HEADER": "1", "AGENTSITE_LOGIN_RATE_LIMIT": "1000"}
    if two_hosts_possible():
        hosts = TwoHosts(env=env).start()
        servers, stop = hosts.hosts, hosts.stop
    else:  # SQLite is one host's database: the workers of one serve
        server = LiveServer(env=env).start()
        servers, stop = (server,), server.stop
    try:
        yield Deployment(servers, servers[0].login()["token"])
    finally:
        stop()


def challenge_of(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


def form(deployment: Deployment, pid: int, path: str, data: dict[str, str]) -> requests.Response:
    return deployment.via(pid, "POST", path, data=data)


def consent(deployment: Deployment, authorize_at: int, decide_at: int, query: dict[str, str]) -> dict[str, str]:
    """The authorization request on one process, the consent page's read and the decision on another; the query
    the client's redirect URI receives."""
    started = deployment.via(authorize_at, "GET", f"/oauth/authorize?{urlencode(query)}")
    assert started.status_code == 302, started.text
    consent_id = started.headers["Location"].rsplit("/", 1)[1]
    shown = deployment.via(decide_at, "GET", f"/api/oauth/consents/{consent_id}", headers=deployment.dashboard)
    assert shown.status_code == 200, shown.text
    assert shown.json()["resource"] == f"{deployment.origin}/mcp"
    decided = deployment.via(authorize_at, "POST", f"/api/oauth/consents/{consent_id}", json={"allow": True},
                             headers=deployment.dashboard)
    assert decided.status_code == 200, decided.text
    location = decided.json()["redirect_to"]
    assert location.startswith(REDIRECT + "?"), location
    return {key: values[0] for key, values in parse_qs(urlsplit(location).query).items()}


def mcp_status(deployment: Deployment, pid: int, token: str) -> int:
    """The status of an MCP initialize with the token, answered by process `pid`."""
    response = deployment.via(pid, "POST", "/mcp", json=INITIALIZE,
                              headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"})
    if response.status_code == 401:
        assert 'error="invalid_token"' in response.headers["WWW-Authenticate"], response.headers
    return response.status_code


def test_the_flow_holds_whichever_process_each_step_lands_on(deployment):
    first = deployment.processes[0]
    second = deployment.other_than(first)
    resource = f"{deployment.origin}/mcp"
    registered = deployment.via(first, "POST", "/oauth/register", json={
        "client_name": "Roaming connector", "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"]})
    assert registered.status_code == 201, registered.text
    client_id = registered.json()["client_id"]

    def grant(authorize_at: int, decide_at: int) -> dict[str, Any]:
        verifier = secrets.token_urlsafe(48)
        query = consent(deployment, authorize_at, decide_at, {
            "response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT, "state": "s1",
            "code_challenge": challenge_of(verifier), "code_challenge_method": "S256", "resource": resource})
        assert query["state"] == "s1"
        exchanged = form(deployment, decide_at, "/oauth/token", {
            "grant_type": "authorization_code", "code": query["code"], "redirect_uri": REDIRECT,
            "code_verifier": verifier, "client_id": client_id, "resource": resource})
        assert exchanged.status_code == 200, exchanged.text
        return exchanged.json()

    def rotate(pid: int, refresh_token: str) -> requests.Response:
        return form(deployment, pid, "/oauth/token", {"grant_type": "refresh_token", "refresh_token": refresh_token,
                                                       "client_id": client_id, "resource": resource})

    tokens = grant(second, first)
    assert mcp_status(deployment, second, tokens["access_token"]) == 200
    rotated = rotate(first, tokens["refresh_token"])
    assert rotated.status_code == 200, rotated.text
    rotated = rotated.json()
    # The old access token ended with its refresh, in the process that had it cached too.
    assert mcp_status(deployment, second, tokens["access_token"]) == 401
    assert mcp_status(deployment, first, rotated["access_token"]) == 200
    revoked = form(deployment, second, "/oauth/revoke", {"token": rotated["refresh_token"], "client_id": client_id})
    assert revoked.status_code == 200, revoked.text
    assert mcp_status(deployment, first, rotated["access_token"]) == 401

    # Reuse detection across processes: a rotated refresh token presented again on one process ends the
    # newest access token that another process had cached.
    tokens = grant(first, second)
    newest = rotate(second, tokens["refresh_token"]).json()
    assert mcp_status(deployment, first, newest["access_token"]) == 200
    reused = rotate(second, tokens["refresh_token"])
    assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant"
    assert mcp_status(deployment, first, newest["access_token"]) == 401
    assert rotate(first, newest["refresh_token"]).status_code == 400


class Memory(TokenStorage):
    """The SDK client's storage, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.info = client_info


class Alternating(httpx2.AsyncBaseTransport):
    """The SDK client's transport: its OAuth requests (discovery, registration, token) go to the deployment's
    processes in turn, each through a connection pinned to one process (on its host, with the first host's
    Host header), the answering process checked; its /mcp requests go to the first host as usual."""

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment
        self.default = httpx2.AsyncHTTPTransport()
        self.pinned: list[tuple[int, LiveServer, httpx2.AsyncHTTPTransport]] = []
        self.answered: list[tuple[str, int]] = []  # (path, process) of each OAuth request

    async def pin(self) -> None:
        """One single-connection transport per process of the deployment."""
        deadline = time.monotonic() + 30
        for server in self.deployment.servers:
            while sum(1 for _, host, _ in self.pinned if host is server) < default_workers():
                assert time.monotonic() < deadline, "a pinned connection to each process"
                # No keep-alive expiry: httpx closes an idle connection after 5 s; a new one may reach another process.
                transport = httpx2.AsyncHTTPTransport(limits=httpx2.Limits(max_connections=1, keepalive_expiry=None))
                response = await transport.handle_async_request(httpx2.Request("GET", f"{server.base_url}/api/health"))
                await response.aread()
                pid = int(response.headers[HEADER])
                if pid in {known for known, _, _ in self.pinned}:
                    await transport.aclose()
                else:
                    self.pinned.append((pid, server, transport))

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        path = request.url.path
        if not (path.startswith("/oauth/") or path.startswith("/.well-known/")):
            return await self.default.handle_async_request(request)
        pid, server, transport = self.pinned[len(self.answered) % len(self.pinned)]
        port = urlsplit(server.base_url).port
        request.url = request.url.copy_with(port=port)
        request.headers["Host"] = self.deployment.host
        response = await transport.handle_async_request(request)
        assert int(response.headers[HEADER]) == pid, f"{path} was answered by another process than {pid}"
        self.answered.append((path, pid))
        return response

    async def aclose(self) -> None:
        """Kept open when an httpx client using it closes: the pinned connections serve the next session."""

    async def close_all(self) -> None:
        await self.default.aclose()
        for _, _, transport in self.pinned:
            await transport.aclose()


async def test_the_mcp_sdks_oauth_client_connects_lists_calls_and_refreshes(deployment):
    storage, codes = Memory(), asyncio.Queue()
    processes = deployment.processes

    async def redirect_handler(url: str) -> None:
        """The browser's part, on other processes than the SDK's last request: the authorization request, then
        the user's consent on the dashboard."""
        parts = urlsplit(url)
        query = {key: values[0] for key, values in parse_qs(parts.query).items()}
        assert parts.path == "/oauth/authorize" and query["code_challenge_method"] == "S256"
        assert query["resource"] == f"{deployment.origin}/mcp", query
        answer = await asyncio.to_thread(consent, deployment, processes[0], processes[-1], query)
        # As a browser's redirect carries it: the SDK checks iss against the issuer it discovered (RFC 9207).
        await codes.put(AuthorizationCodeResult(code=answer["code"], state=answer.get("state"), iss=answer.get("iss")))

    async def callback_handler() -> AuthorizationCodeResult:
        return await codes.get()

    provider = OAuthClientProvider(f"{deployment.origin}/mcp", OAuthClientMetadata(
        client_name="SDK connector", redirect_uris=[REDIRECT], grant_types=["authorization_code", "refresh_token"],
        response_types=["code"], token_endpoint_auth_method="none"), storage, redirect_handler, callback_handler)
    transport = Alternating(deployment)
    await transport.pin()

    async def session_round(name: str) -> None:
        async with httpx2.AsyncClient(auth=provider, transport=transport, timeout=30) as http, \
                streamable_http_client(f"{deployment.origin}/mcp", http_client=http) as (read, write, *_), \
                ClientSession(read, write) as session:
            await session.initialize()
            tools = {tool.name for tool in (await session.list_tools()).tools}
            assert "kb_search" in tools, tools
            assert "computer_screenshot" not in tools  # an OAuth grant never acts as an admin
            result = await session.call_tool("kb_search", {"query": name})
            assert not result.is_error, result

    await session_round("first")
    first = storage.tokens
    assert first is not None and first.access_token.startswith("asa-") and first.refresh_token
    paths = [path for path, _ in transport.answered]
    assert "/oauth/register" in paths and "/oauth/token" in paths, paths
    assert len({pid for _, pid in transport.answered}) == min(len(transport.answered), len(processes)), \
        transport.answered

    # The client holds its token as expired: its next request refreshes first (through another process).
    provider.context.token_expiry_time = time.time() - 1
    answered = len(transport.answered)
    await session_round("second")
    assert storage.tokens.access_token != first.access_token
    assert storage.tokens.refresh_token != first.refresh_token
    assert [path for path, _ in transport.answered[answered:]] == ["/oauth/token"], transport.answered
    await transport.close_all()

"""agentsite added as a connector by the official MCP Python SDK's OAuth client (issue 48), end to end, against
`serve` with two workers: `OAuthClientProvider` discovers the authorization server from /mcp's 401, registers
itself, and opens the authorization URL in Chromium (its redirect handler), where the user signs in on the
dashboard and allows the app on the consent page; the browser lands on the app's loopback redirect URI, whose
code the callback handler hands back; the SDK exchanges it, lists and calls tools, and later refreshes. The
user then disconnects the app on the Keys page, and the SDK's next call is refused (401) at once. A denied
consent sends the app error=access_denied, and the SDK gets no token.

Chromium runs through Playwright's async API in the test's own event loop, beside the SDK (the sync API would
hold an event loop in this thread for the whole package, see tests/dashboard/conftest.py).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
import requests
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from playwright.async_api import async_playwright, expect

from tests.dashboard.conftest import CHROMIUM, TIMEOUT_MS, _missing
from tests.needs import unavailable
from tests.server import LiveServer

pytestmark = pytest.mark.e2e

APP = "SDK test connector"
NOTE = "The harbour master's code word is cormorant-19."
DEADLINE_S = 20.0


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    reason = _missing()
    if reason:
        unavailable(reason)
    live = LiveServer(workers=2, env={"AGENTSITE_LOGIN_RATE_LIMIT": "1000", "AGENTSITE_WORKER_HEADER": "1"}).start()
    try:
        token = live.login()["token"]
        added = requests.post(f"{live.base_url}/api/kb/documents", json={"filename": "harbour.md", "content": NOTE},
                              headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert added.status_code == 201, added.text
        yield live
    finally:
        live.stop()


class Memory(TokenStorage):
    """The app's token store: in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class Callback:
    """The app's redirect URI: a loopback HTTP server that keeps each query it is sent and says so to the browser."""

    def __init__(self) -> None:
        self.queries: list[dict[str, list[str]]] = []
        self.arrived = threading.Event()
        callback = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                url = urlsplit(self.path)
                if url.path != "/callback":  # the browser's /favicon.ico
                    self.send_error(404)
                    return
                callback.queries.append(parse_qs(url.query))
                callback.arrived.set()
                body = b"<!doctype html><title>Connector</title><h1>Back in the app</h1>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.uri = f"http://127.0.0.1:{self.http.server_address[1]}/callback"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    async def next_query(self) -> dict[str, list[str]]:
        """The query of the next visit (waits for it, with a deadline)."""
        arrived = await asyncio.to_thread(self.arrived.wait, DEADLINE_S)
        assert arrived, "the browser never came back to the app's redirect URI"
        self.arrived.clear()
        return self.queries[-1]

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@dataclass
class Seen:
    """The answers the SDK's client received: (method, path, status, worker)."""

    answers: list[tuple[str, str, int, str]] = field(default_factory=list)

    async def record(self, response: httpx2.Response) -> None:
        self.answers.append((response.request.method, response.request.url.path, response.status_code,
                             response.headers.get("x-agentsite-worker", "")))

    def paths(self) -> list[str]:
        return [f"{method} {path} {status}" for method, path, status, _ in self.answers]


@dataclass
class Connector:
    """One app: the SDK's provider, its store and what its client saw; `browser` is the user's page in Chromium."""

    server: LiveServer
    page: object
    callback: Callback
    decision: str = "Allow"
    storage: Memory = field(default_factory=Memory)
    seen: Seen = field(default_factory=Seen)
    authorizations: list[str] = field(default_factory=list)
    refuse_more: bool = False
    disconnected_at: int = 0

    async def redirect_handler(self, url: str) -> None:
        """What a desktop app does with the authorization URL: open it in the user's browser, where the user signs
        in (the first time) and decides on the consent page."""
        self.authorizations.append(url)
        if self.refuse_more:
            raise RuntimeError("the app was asked to authorize again")
        page = self.page
        await page.goto(url)
        if not self.authorizations[:-1]:
            await page.get_by_label("Username").fill("admin")
            await page.get_by_label("Password").fill(self.server.admin_password)
            await page.get_by_role("button", name="Log in").click()
        card = page.get_by_role("region", name=f"{APP} wants to use your agentsite account")
        await expect(card).to_be_visible()
        await expect(card.locator(".consent-host")).to_have_text(urlsplit(self.callback.uri).netloc)
        await expect(card.locator(".consent-user")).to_have_text("admin")
        await page.get_by_role("button", name=self.decision, exact=True).click()
        await page.wait_for_url(f"{self.callback.uri}?**")
        await expect(page.get_by_role("heading", name="Back in the app")).to_be_visible()

    async def callback_handler(self) -> AuthorizationCodeResult:
        query = await self.callback.next_query()
        if "error" in query:
            raise PermissionError(f"the app was sent {query}")
        # The whole redirect, as a connector reads it: the SDK checks iss against the issuer it discovered (RFC 9207).
        return AuthorizationCodeResult(code=query["code"][0], state=query.get("state", [None])[0],
                                       iss=query.get("iss", [None])[0])

    def provider(self) -> OAuthClientProvider:
        metadata = OAuthClientMetadata(client_name=APP, redirect_uris=[self.callback.uri],
                                       grant_types=["authorization_code", "refresh_token"], response_types=["code"],
                                       token_endpoint_auth_method="none")
        return OAuthClientProvider(f"{self.server.base_url}/mcp", metadata, self.storage, self.redirect_handler,
                                   self.callback_handler)

    @asynccontextmanager
    async def session(self, provider: OAuthClientProvider) -> AsyncIterator[ClientSession]:
        # No keep-alive: each request is a new connection, which either worker may accept.
        transport = httpx2.AsyncHTTPTransport(limits=httpx2.Limits(max_keepalive_connections=0))
        async with httpx2.AsyncClient(auth=provider, transport=transport, timeout=30,
                                      event_hooks={"response": [self.seen.record]}) as http, \
                streamable_http_client(f"{self.server.base_url}/mcp", http_client=http) as (read, write, *_), \
                ClientSession(read, write) as session:
            await session.initialize()
            yield session


@pytest.fixture
async def chromium() -> AsyncIterator:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = await browser.new_context(viewport={"width": 1280, "height": 800})
        context.set_default_timeout(TIMEOUT_MS)
        page = await context.new_page()
        page.problems = []
        page.on("pageerror", lambda error: page.problems.append(f"page error: {error}"))
        try:
            yield page
        finally:
            await browser.close()


@pytest.fixture
def callback() -> Iterator[Callback]:
    server = Callback()
    yield server
    server.close()


def text_of(result) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


def mcp_status(server: LiveServer, token: str) -> requests.Response:
    return requests.post(f"{server.base_url}/mcp", timeout=10, json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                         headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"})


async def disconnect_on_the_keys_page(page, server: LiveServer, disconnected: Callable[[], None]) -> None:
    """The user's Disconnect on the Keys page; `disconnected()` is called once the page's DELETE is answered (the
    app's tokens are revoked from then on), before the page's own update is awaited."""
    await page.goto(f"{server.base_url}/#/keys")
    row = page.locator("tr[data-app]").filter(has_text=APP)
    await expect(row).to_have_count(1)
    await page.get_by_role("button", name=f"Disconnect {APP}").click()
    dialog = page.get_by_role("dialog")
    await expect(dialog).to_contain_text("loses access")
    async with page.expect_response(lambda answer: answer.request.method == "DELETE"
                                    and "/api/oauth/apps/" in answer.url) as deleted:
        await dialog.get_by_role("button", name="Disconnect").click()
    assert (await deleted.value).status == 204
    disconnected()
    await expect(page.get_by_text("No app is connected.")).to_be_visible()


async def test_the_sdk_connects_through_the_consent_page_refreshes_and_is_cut_off_when_disconnected(
        server, chromium, callback):
    app = Connector(server, chromium, callback)
    provider = app.provider()
    asked_again: list[BaseException] = []
    try:
        async with asyncio.timeout(120), app.session(provider) as session:
            await use_then_disconnect(app, provider, session)
    except* RuntimeError as group:
        # The SDK's failed re-authorization ends its transport's task group (and the session) with it.
        unexpected = group.subgroup(lambda error: isinstance(error, RuntimeError)
                                    and "asked to authorize again" not in str(error))
        if unexpected:
            raise unexpected from None
        asked_again.append(group)
    assert asked_again, "the SDK's calls went on after the app was disconnected"
    after = app.seen.answers[app.disconnected_at:]
    # The SDK's next request to /mcp, its next call (POST) or its stream opened again (GET), whichever comes
    # first, is refused, and so is every later one with that token.
    assert after and after[0][1:3] == ("/mcp", 401), app.seen.paths()[app.disconnected_at:]
    assert {status for _, path, status, *_ in after if path == "/mcp"} == {401}, app.seen.paths()[app.disconnected_at:]
    assert len(app.authorizations) == 2, "the SDK did not go back to the user for a new authorization"
    tokens = app.storage.tokens
    assert tokens is not None
    refused = mcp_status(server, tokens.access_token)
    assert refused.status_code == 401
    assert 'error="invalid_token"' in refused.headers["WWW-Authenticate"]
    assert chromium.problems == []


async def use_then_disconnect(app: Connector, provider: OAuthClientProvider, session: ClientSession) -> None:
    """The connected SDK's first calls, a refresh, then the user's Disconnect on the Keys page and one more call."""
    server = app.server
    # Discovery from the 401, registration, the consent in Chromium, the token exchange.
    assert app.seen.answers[0][1:3] == ("/mcp", 401), app.seen.paths()
    paths = app.seen.paths()
    for step in ("GET /.well-known/oauth-protected-resource/mcp 200",
                 "GET /.well-known/oauth-authorization-server 200", "POST /oauth/register 201",
                 "POST /oauth/token 200"):
        assert step in paths, paths
    assert len(app.authorizations) == 1
    first = app.storage.tokens
    assert first is not None and first.access_token.startswith("asa-") and first.scope == "mcp"
    assert first.refresh_token and first.refresh_token.startswith("asr-")

    names = {tool.name for tool in (await session.list_tools()).tools}
    assert "kb_search" in names, names
    found = await session.call_tool("kb_search", {"query": "harbour master code word", "topK": 2})
    assert found.is_error is False, found
    assert "cormorant-19" in text_of(found)  # the admin's knowledge: the token acts as the user

    # An hour later the access token has expired (its expires_in): the SDK refreshes before its next call.
    provider.context.token_expiry_time = 1.0  # a time long past (0 would read as "no expiry")
    listed = await session.list_tools()
    assert "kb_search" in {tool.name for tool in listed.tools}
    assert "POST /oauth/token 200" in app.seen.paths()[len(paths):], app.seen.paths()
    second = app.storage.tokens
    assert second is not None and second.access_token != first.access_token
    assert second.refresh_token != first.refresh_token  # rotated
    assert mcp_status(server, first.access_token).status_code == 401  # the old one is over
    assert len(app.authorizations) == 1  # no new consent for a refresh

    # The user disconnects the app on the Keys page: its next call is refused at once, and the SDK,
    # refused, can only ask the user again. The SDK may ask before the test's next call: its own GET of /mcp
    # comes whenever it comes, and once refused it starts a new authorization in the background while the page
    # still shows the Keys page. So a new authorization is refused from before the click (not sent through the
    # browser, which the page still needs), and the answers count as after the disconnect from the DELETE's
    # answer on.

    def disconnected() -> None:
        app.disconnected_at = len(app.seen.answers)

    app.refuse_more = True
    await disconnect_on_the_keys_page(app.page, server, disconnected)
    await session.call_tool("kb_search", {"query": "harbour master code word"})


async def test_a_denied_consent_gives_the_sdk_access_denied_and_no_token(server, chromium, callback):
    app = Connector(server, chromium, callback, decision="Deny")
    refused: list[BaseException] = []
    try:
        async with asyncio.timeout(60), app.session(app.provider()):
            pass
    except* PermissionError as group:  # the callback handler's, as the SDK passes it on
        refused.append(group)
    assert refused, "the SDK connected although the consent was denied"
    assert len(app.authorizations) == 1
    query = callback.queries[-1]
    state = parse_qs(urlsplit(app.authorizations[0]).query)["state"]
    assert query["error"] == ["access_denied"] and query["state"] == state and "code" not in query
    assert app.storage.tokens is None
    assert "POST /oauth/token 200" not in app.seen.paths()

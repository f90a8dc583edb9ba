"""Remote MCP servers with OAuth on the MCP page, in a real browser (issue 48), against a second agentsite (B)
whose /mcp requires OAuth: the connect form with Authentication OAuth sends {auth: "oauth", scopes, ...}, and on
202 the same tab goes to B's authorization URL; once consented at B, B's callback brings the browser back to
#/mcp?connected=<name>, which the page names (as it names ?oauth_error=<code>), once: the address goes back to
#/mcp. A server that needs authorization shows it, and Reconnect goes to a new authorization URL."""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from playwright.sync_api import expect

from tests.server import LiveServer

pytestmark = pytest.mark.e2e  # every test here starts a process


def test_coming_back_from_the_consent_names_the_server_or_the_error(logged_in_page, shot):
    page = logged_in_page
    page.problems.clear()
    page.goto("/#/mcp?connected=tracker")
    outcome = page.locator(".mcp-outcome")
    expect(outcome).to_have_text("Connected tracker: it is authorized and its tools are listed.")
    expect(outcome).to_have_attribute("role", "status")
    expect(page.get_by_role("heading", name="Servers")).to_be_visible()  # the page itself, not "Not found"
    assert page.evaluate("location.hash") == "#/mcp"
    shot(page, "mcp-oauth-connected")
    page.reload()
    expect(page.get_by_role("heading", name="Servers")).to_be_visible()
    expect(page.locator(".mcp-outcome")).to_have_count(0)  # said once

    page.goto("/#/mcp?oauth_error=access_denied")
    outcome = page.locator(".mcp-outcome")
    expect(outcome).to_have_text("The authorization of the server did not finish: the remote server's sign-in was "
                                 "refused or cancelled (access_denied).")
    expect(outcome).to_have_attribute("role", "alert")
    assert page.evaluate("location.hash") == "#/mcp"
    page.goto("/#/mcp?oauth_error=some_new_code&server=docs")  # a code the page has no words for: shown as it is
    expect(page.locator(".mcp-outcome")).to_have_text(
        "The authorization of docs did not finish: an error (some_new_code).")
    assert page.problems == []


# --- against a real remote: a second agentsite (B) whose /mcp requires OAuth ---------------------------------

@pytest.fixture(scope="module")
def dashboard_server() -> Iterator[LiveServer]:
    """This module's agentsite (A), started as `serve` (several workers: the connect, the callback and the
    listing may each land on another), allowed to reach B on loopback."""
    server = LiveServer(command="serve", env={"AGENTSITE_LOGIN_RATE_LIMIT": "1000",
                                              "AGENTSITE_ALLOW_PRIVATE_FETCH": "1"}).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def remote() -> Iterator[LiveServer]:
    """B: the remote MCP server and its own authorization server."""
    server = LiveServer(command="serve").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def remote_headers(remote: LiveServer) -> dict[str, str]:
    return {"Authorization": f"Bearer {remote.login()['token']}"}


def consent_at(remote: LiveServer, page, headers: dict[str, str], allow: bool = True) -> str:
    """Decide the consent B's authorize sent the browser to (B's /#/consent/<id>, where B's admin would sign in
    and allow it: that page is B's own dashboard, tested with it); the address B sends the browser on to."""
    page.wait_for_url(re.compile(re.escape(remote.base_url) + r"/#/consent/[^/?#]+$"))
    consent_id = page.url.rsplit("/", 1)[1]
    answer = requests.post(f"{remote.base_url}/api/oauth/consents/{consent_id}", json={"allow": allow},
                           headers=headers, timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()["redirect_to"]


def test_an_admin_connects_a_remote_with_oauth_consents_there_and_comes_back_connected(
        logged_in_page, dashboard_server, remote, remote_headers, admin_headers, shot):
    page = logged_in_page
    page.problems.clear()
    page.goto("/#/mcp")
    form = page.get_by_role("form", name="Connect a server")
    form.get_by_label("Server name").fill("remote-b")
    form.get_by_label("Transport").select_option("streamable-http")
    form.get_by_label("URL").fill(f"{remote.base_url}/mcp")
    expect(form.get_by_label("Client ID")).to_be_hidden()
    form.get_by_label("Authentication").select_option("oauth")
    expect(form.get_by_label("Headers (Name: value per line)")).to_be_hidden()
    form.get_by_label("Scopes (space-separated)").fill("mcp")
    visited: list[str] = []
    page.on("request", lambda request: request.is_navigation_request() and visited.append(request.url))
    # The connect asks B (discovery, registration) before it answers: longer than a page's own waits.
    with page.expect_response(lambda response: response.url.endswith("/api/mcp/connect"), timeout=30_000) as connected:
        form.get_by_role("button", name="Connect").click()
    response = connected.value
    assert response.request.post_data_json == {
        "name": "remote-b", "url": f"{remote.base_url}/mcp", "transport": "streamable-http", "auth": "oauth",
        "scopes": ["mcp"], "visibility": "private"}
    assert response.status == 202
    # The same tab goes to B's authorization URL (the 202's; its body is gone with the page, so the address
    # is read off the navigation), which sends it on to B's consent page: B's admin signs in there (the tab holds
    # no sign-in of B's origin) and allows A.
    page.wait_for_url(re.compile(re.escape(remote.base_url) + r"/#/consent/[^/?#]+$"))
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill(remote.admin_password)
    page.get_by_role("button", name="Log in").click()
    expect(page.locator(".consent")).to_contain_text(urlsplit(dashboard_server.base_url).netloc)  # where it goes
    authorization = [url for url in visited if url.startswith(f"{remote.base_url}/oauth/authorize?")]
    assert len(authorization) == 1, visited
    query = parse_qs(urlsplit(authorization[0]).query)
    assert query["resource"] == [f"{remote.base_url}/mcp"] and query["scope"] == ["mcp"]
    assert query["code_challenge_method"] == ["S256"]
    assert query["redirect_uri"] == [f"{dashboard_server.base_url}/api/mcp/oauth/callback"]

    # B's answer to the browser: back to A's callback, which takes the tokens from B, connects and lists the
    # tools before it sends the browser on to A's MCP page (longer than a page's own waits).
    with page.expect_navigation(url=re.compile(re.escape(dashboard_server.base_url) + "/"), timeout=30_000):
        page.get_by_role("button", name="Allow", exact=True).click()
    outcome = page.locator(".mcp-outcome")
    expect(outcome).to_have_text("Connected remote-b: it is authorized and its tools are listed.")
    assert page.evaluate("location.hash") == "#/mcp"
    row = page.locator('tr[data-server="remote-b"]')
    # The listing is answered by whichever worker: one that has not reached B yet connects to it first.
    expect(row.locator(".mcp-oauth-state")).to_contain_text("OAuth: authorized, token until", timeout=30_000)
    expect(row.get_by_role("button", name="Reconnect remote-b")).to_have_count(0)
    expect(page.locator(".mcp-tools")).to_contain_text("remote-b")  # B's tools, listed through the grant
    server = next(item for item in requests.get(f"{dashboard_server.base_url}/api/mcp/servers", headers=admin_headers,
                                                timeout=10).json()["servers"] if item["name"] == "remote-b")
    assert server["oauth"]["status"] == "authorized"
    shot(page, "mcp-oauth-authorized")
    assert page.problems == []


def test_a_server_that_needs_authorization_shows_reconnect_which_goes_to_a_new_consent(
        logged_in_page, dashboard_server, remote, admin_headers, shot):
    base = dashboard_server.base_url
    first = requests.post(f"{base}/api/mcp/connect", headers=admin_headers, timeout=30, json={
        "name": "remote-later", "url": f"{remote.base_url}/mcp", "auth": "oauth"})
    assert first.status_code == 202, first.text
    page = logged_in_page
    page.goto("/#/mcp")
    row = page.locator('tr[data-server="remote-later"]')
    expect(row.locator(".mcp-oauth-state")).to_have_text(
        "OAuth: needs authorization: its tools are left out until an admin reconnects it.")
    shot(page, "mcp-oauth-needs-authorization")
    visited: list[str] = []
    page.on("request", lambda request: request.is_navigation_request() and visited.append(request.url))
    reconnect = "/api/mcp/servers/remote-later/reconnect"
    with page.expect_response(lambda response: response.url.endswith(reconnect), timeout=30_000) as sent:
        row.get_by_role("button", name="Reconnect remote-later").click()
    assert sent.value.status == 202
    page.wait_for_url(re.compile(re.escape(remote.base_url) + r"/#/consent/"))
    authorization = [url for url in visited if url.startswith(f"{remote.base_url}/oauth/authorize?")]
    assert len(authorization) == 1, visited
    # A new consent: not the first connect's address (its state is another).
    assert authorization[0] != first.json()["authorization_url"]
    assert parse_qs(urlsplit(authorization[0]).query)["state"] != parse_qs(
        urlsplit(first.json()["authorization_url"]).query)["state"]

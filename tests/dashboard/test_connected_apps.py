"""The Keys page's "Connected apps" (issue 48): the OAuth apps (MCP connectors, A2A clients) holding a live grant for
the user, with the host each redirects to, what it may use (MCP, A2A: its grants' resources), when it was connected,
last used and expires; Disconnect asks first and ends the
app's tokens at once; another user sees none of them; with none, the page says how to connect one. At 375 px
nothing overflows."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from playwright.sync_api import expect

from tests.dashboard.conftest import DESKTOP, PHONE
from tests.dashboard.test_consent import authorization, exchange
from tests.dashboard.test_layout import assert_fits
from tests.server import LiveServer

pytestmark = pytest.mark.e2e  # every test here starts a process


def connect(server: LiveServer, user_token: str, name: str, resource: str = "mcp") -> str:
    """An app connected to the user's account as a connector (or an A2A client, for the resource a2a) would, the
    consent given through the API: its access token, used once on /mcp (an A2A client's is not)."""
    auth = authorization(server, name, resource)
    sent = requests.get(auth.url, allow_redirects=False, timeout=10)
    assert sent.status_code == 302, sent.text
    consent = urlsplit(sent.headers["Location"]).fragment.rsplit("/", 1)[1]
    decided = requests.post(f"{server.base_url}/api/oauth/consents/{consent}", json={"allow": True}, timeout=10,
                            headers={"Authorization": f"Bearer {user_token}"})
    assert decided.status_code == 200, decided.text
    code = parse_qs(urlsplit(decided.json()["redirect_to"]).query)["code"][0]
    token = exchange(server, auth, code)
    assert token.status_code == 200, token.text
    access = token.json()["access_token"]
    if resource == "mcp":
        assert mcp_ping(server, access).status_code == 200
    return access


def mcp_ping(server: LiveServer, token: str) -> requests.Response:
    return requests.post(f"{server.base_url}/mcp", timeout=10, json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                         headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"})


def test_a_user_sees_their_connected_app_and_disconnects_it(user_page, dashboard_server, normal_user, admin_headers,
                                                           shot):
    page = user_page
    page.problems.clear()
    token = connect(dashboard_server, normal_user["token"], "Claude desktop test")
    admin_token = connect(dashboard_server, admin_headers["Authorization"].split()[1], "The admin's app")
    page.goto("/#/keys")
    section = page.get_by_role("region", name="Connected apps")
    row = section.locator("tr[data-app]")
    expect(row).to_have_count(1)  # the admin's app is not this user's
    expect(row.get_by_role("rowheader")).to_have_text("Claude desktop test")
    expect(row).to_contain_text("127.0.0.1:")
    last_used = row.locator("td[data-label='Last used']")
    expect(last_used.locator("time")).to_have_count(1)  # used on /mcp: not "Never"
    expect(row.locator("td[data-label='Expires'] time")).to_have_count(1)
    for size, label in ((PHONE, "375"), (DESKTOP, "1280")):
        page.set_viewport_size(size)
        assert_fits(page, f"#/keys with a connected app at {label} px")
        shot(page, f"keys-connected-apps-{label}")

    # Cancel keeps it; Disconnect ends its tokens at once.
    page.get_by_role("button", name="Disconnect Claude desktop test").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Claude desktop test")
    dialog.get_by_role("button", name="Cancel").click()
    expect(row).to_have_count(1)
    assert mcp_ping(dashboard_server, token).status_code == 200
    page.get_by_role("button", name="Disconnect Claude desktop test").click()
    page.get_by_role("dialog").get_by_role("button", name="Disconnect").click()
    expect(page.get_by_role("status").filter(has_text="Disconnected Claude desktop test.")).to_be_visible()
    expect(section.get_by_text("No app is connected.")).to_be_visible()
    refused = mcp_ping(dashboard_server, token)
    assert refused.status_code == 401 and 'error="invalid_token"' in refused.headers["WWW-Authenticate"]
    assert mcp_ping(dashboard_server, admin_token).status_code == 200  # another user's app goes on
    assert page.problems == []


def test_each_app_says_what_it_may_use_mcp_or_a2a(user_page, dashboard_server, normal_user):
    page = user_page
    page.problems.clear()
    connect(dashboard_server, normal_user["token"], "An MCP connector")
    connect(dashboard_server, normal_user["token"], "An A2A client", resource="a2a")
    page.goto("/#/keys")
    section = page.get_by_role("region", name="Connected apps")
    expect(section).to_contain_text("your agents over A2A")
    expect(section.locator("tr[data-app]").filter(has_text="An MCP connector").locator(
        "td[data-label='May use']")).to_have_text("MCP")
    expect(section.locator("tr[data-app]").filter(has_text="An A2A client").locator(
        "td[data-label='May use']")).to_have_text("A2A")
    assert page.problems == []


def test_with_no_app_the_section_says_how_to_connect_one(logged_in_page, dashboard_server, admin_headers):
    page = logged_in_page
    page.problems.clear()
    for app in requests.get(f"{dashboard_server.base_url}/api/oauth/apps", headers=admin_headers,
                            timeout=10).json()["results"]:
        requests.delete(f"{dashboard_server.base_url}/api/oauth/apps/{app['client_id']}", headers=admin_headers,
                        timeout=10).raise_for_status()
    page.goto("/#/keys")
    section = page.get_by_role("region", name="Connected apps")
    expect(section.get_by_text("No app is connected.")).to_be_visible()
    section.get_by_role("link", name="MCP page").click()
    expect(page).to_have_url(f"{dashboard_server.base_url}/#/mcp")
    assert page.problems == []

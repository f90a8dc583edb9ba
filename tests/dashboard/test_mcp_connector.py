"""The MCP page's connector panel in a real browser (issue 48): every user sees this server's MCP URL (the
address the dashboard was opened at, plus /mcp) and copies it with the button, with each client's steps (VS
Code's mcp.json with the URL in it); over http it says Claude and ChatGPT need https. At 375 and 1280 px
nothing overflows. The URL is the one the server names as its resource (its 401 and metadata agree)."""

from __future__ import annotations

import json

import pytest
import requests
from playwright.sync_api import expect

from tests.dashboard.conftest import DESKTOP, PHONE
from tests.dashboard.test_layout import assert_fits

pytestmark = pytest.mark.e2e  # every test here starts a process


def test_a_user_copies_this_servers_mcp_url_for_a_connector(user_page, dashboard_server, shot):
    page = user_page
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.problems.clear()
    page.goto("/#/mcp")
    panel = page.get_by_role("region", name="Use agentsite as a connector")
    url = f"{dashboard_server.base_url}/mcp"
    expect(panel.get_by_label("This server's MCP URL")).to_have_value(url)
    # The URL the panel gives is the resource this server names itself by (what a connector is sent to).
    challenge = requests.post(url, json={}, timeout=10)
    assert challenge.status_code == 401
    metadata = requests.get(f"{dashboard_server.base_url}/.well-known/oauth-protected-resource/mcp", timeout=10).json()
    assert metadata["resource"] == url

    panel.get_by_role("button", name="Copy").click()
    expect(panel.get_by_role("status")).to_have_text("Copied.")
    assert page.evaluate("navigator.clipboard.readText()") == url
    for client in ("Claude", "ChatGPT", "VS Code", "MCP Inspector"):
        expect(panel.locator("li", has=page.locator("strong", has_text=client))).to_have_count(1)
    vscode = json.loads(panel.locator("pre.mcp-connector-code").text_content())
    assert vscode == {"servers": {"agentsite": {"type": "http", "url": url}}}
    expect(panel).to_contain_text("Keys → Connected apps")
    expect(panel.locator(".mcp-connector-https")).to_contain_text("need an https address")  # the test server is http
    for size, label in ((PHONE, "375"), (DESKTOP, "1280")):
        page.set_viewport_size(size)
        expect(panel).to_be_visible()
        assert_fits(page, f"#/mcp's connector panel at {label} px")
        shot(page, f"mcp-connector-{label}")
    assert page.problems == []


def test_the_panel_names_the_address_the_dashboard_was_opened_at(browser, dashboard_server, normal_user):
    # The same server reached as localhost: the URL follows the address (the Host a client will use too).
    from tests.dashboard.conftest import log_in

    base = dashboard_server.base_url.replace("127.0.0.1", "localhost")
    context = browser.new_context(viewport=DESKTOP, base_url=base)
    try:
        page = context.new_page()
        log_in(page, dashboard_server, normal_user["username"], normal_user["password"])
        page.goto("/#/mcp")
        expect(page.get_by_label("This server's MCP URL")).to_have_value(f"{base}/mcp")
    finally:
        context.close()

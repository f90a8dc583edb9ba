"""Remote MCP servers with OAuth on the MCP page, in a real browser (issue 48): coming back from the remote's
consent, the page names the server connected (?connected=<name>) or the error (?oauth_error=<code>), once (the
address goes back to #/mcp, so a reload does not say it again)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

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

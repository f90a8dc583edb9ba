"""A2A in the dashboard, in a real Chromium: the Agents page shows each agent's A2A URL (copied with its button) and,
on Card, its agent card asked with the user's token (a summary and the JSON); the Keys page offers the scope `a2a`,
and a key made with it reads an agent's card; an admin registers a remote A2A agent (one built with a2a-sdk's own
server classes, tests/a2a_app/remote_agent.py) on the Remote agents page, sees the API's refusals beside the field
they name (the URL, a header), its card's skills and its header's name but never the value, refreshes and deletes
it; a user has no such page. At 375 and 1280 px nothing overflows."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
import requests
from playwright.sync_api import expect

from tests.a2a_app.remote_agent import RemoteAgent, Served
from tests.dashboard.conftest import DESKTOP, PHONE
from tests.dashboard.test_layout import assert_fits
from tests.server import LiveServer

pytestmark = pytest.mark.e2e  # every test here starts a process

HEADER_SECRET = "remote-header-secret-42"


@pytest.fixture(scope="module")
def dashboard_server() -> Iterator[LiveServer]:
    """This module's server, allowed to reach the remote agent on loopback (as MCP URL servers' tests)."""
    server = LiveServer(command="daphne", env={"AGENTSITE_LOGIN_RATE_LIMIT": "1000",
                                               "AGENTSITE_ALLOW_PRIVATE_FETCH": "1"}).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def remote() -> Iterator[RemoteAgent]:
    served = Served(RemoteAgent(name="Echo agent", streaming=True)).start()
    yield served.agent
    served.stop()


def test_an_agent_shows_its_a2a_url_copies_it_and_shows_its_card(logged_in_page, dashboard_server, admin_headers,
                                                                  shot):
    page = logged_in_page
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.problems.clear()
    slug = f"helper-{secrets.token_hex(3)}"
    created = requests.post(f"{dashboard_server.base_url}/api/agents", headers=admin_headers, timeout=10, json={
        "slug": slug, "name": "Helpful helper", "description": "Answers questions about the handbook.",
        "starters": ["Where is the handbook?"]})
    assert created.status_code == 201, created.text
    page.goto("/#/agents")
    item = page.locator(f'[data-agent-slug="{slug}"]')
    url = f"{dashboard_server.base_url}/a2a/{slug}"
    expect(item.get_by_label("A2A URL of Helpful helper", exact=True)).to_have_value(url)
    item.get_by_role("button", name="Copy the A2A URL of Helpful helper").click()
    expect(item.get_by_role("status")).to_have_text("Copied.")
    assert page.evaluate("navigator.clipboard.readText()") == url
    expect(page.get_by_role("region", name="Call your agents over A2A")).to_contain_text("a2a scope")

    card_button = item.get_by_role("button", name="A2A card of Helpful helper")
    expect(card_button).to_have_attribute("aria-expanded", "false")
    card_button.click()
    expect(card_button).to_have_attribute("aria-expanded", "true")
    card = item.locator(".agents-a2a-card")
    facts = card.locator(".agents-a2a-facts")
    expect(facts).to_contain_text("Helpful helper")
    expect(facts.locator("dt", has_text="Version").locator("+ dd")).to_have_text("1")
    expect(facts.locator("dt", has_text="Streaming").locator("+ dd")).to_have_text("Yes")
    expect(facts).to_contain_text(f"{url} (JSONRPC 1.0)")
    expect(card.locator("[data-scheme=bearer]")).to_contain_text("scope a2a")
    expect(card.locator("[data-scheme=oauth2]")).to_contain_text("OAuth 2")
    expect(card.locator(".agents-a2a-skills")).to_contain_text("Helpful helper — Answers questions about the handbook.")
    expect(card.get_by_role("list", name="Examples")).to_contain_text("Where is the handbook?")
    card.get_by_text("The card as JSON").click()
    expect(card.locator("pre")).to_contain_text('"supportedInterfaces"')
    for size, label in ((PHONE, "375"), (DESKTOP, "1280")):
        page.set_viewport_size(size)
        assert_fits(page, f"#/agents with an A2A card open at {label} px")
        shot(page, f"agents-a2a-card-{label}")
    card_button.click()
    expect(card).to_be_hidden()
    assert page.problems == []


def test_the_a2a_scope_is_offered_and_a_key_made_with_it_reads_an_agent_card(user_page, dashboard_server):
    page = user_page
    page.problems.clear()
    page.goto("/#/keys")
    form = page.get_by_role("form", name="New key")
    form.get_by_label("Name").fill("other agent")
    form.get_by_label("v1: the OpenAI-compatible API (/v1)").uncheck()
    form.get_by_label("a2a: A2A, call your agents from other agents (/a2a)").check()
    form.get_by_role("button", name="Create key").click()
    created = page.get_by_role("region", name="Key “other agent” created")
    secret = created.get_by_label("Secret of other agent").input_value()
    expect(page.locator("tr[data-key]").filter(has_text="other agent")).to_contain_text("a2a")
    base = dashboard_server.base_url
    bearer = {"Authorization": f"Bearer {secret}"}
    card = requests.get(f"{base}/a2a/default/.well-known/agent-card.json", headers=bearer, timeout=10)
    assert card.status_code == 200, card.text
    assert requests.get(f"{base}/v1/models", headers=bearer, timeout=10).status_code == 403  # a2a alone
    assert page.problems == []


def test_an_admin_registers_a_remote_agent_sees_its_skills_refreshes_and_deletes_it(logged_in_page, remote, shot):
    page = logged_in_page
    page.problems.clear()
    page.get_by_role("link", name="A2A", exact=True).click()
    expect(page.get_by_role("heading", name="Remote agents", level=1)).to_be_visible()
    list_box = page.get_by_role("region", name="Registered agents")
    expect(list_box.get_by_text("No remote agent is registered.")).to_be_visible()
    form = page.get_by_role("form", name="Register an agent")

    # A URL that answers something other than a card: the API names the URL, and the page says it there.
    form.get_by_label("Name").fill("echo")
    form.get_by_label("URL").fill(f"{remote.base_url}/not-a-card.json")
    form.get_by_role("button", name="Register").click()
    url_error = form.locator("#a2a-error-url")
    expect(url_error).to_be_visible()
    expect(url_error).to_have_attribute("role", "alert")
    expect(form.get_by_label("URL")).to_have_attribute("aria-invalid", "true")
    expect(form.get_by_role("alert").filter(has_text="Not registered: see the fields marked.")).to_be_visible()

    # A header the client sets itself: refused on that header's row.
    form.get_by_label("URL").fill(remote.base_url)
    form.get_by_role("button", name="Add a header").click()
    form.get_by_label("Header 1 name").fill("Content-Type")
    form.get_by_label("Header 1 value").fill("text/plain")
    form.get_by_role("button", name="Register").click()
    expect(form.locator(".a2a-header-row .a2a-field-error")).to_be_visible()
    expect(form.get_by_label("Header 1 name")).to_have_attribute("aria-invalid", "true")
    expect(url_error).to_be_hidden()
    expect(form.get_by_label("URL")).not_to_have_attribute("aria-invalid", "true")

    form.get_by_label("Header 1 name").fill("X-Key")
    form.get_by_label("Header 1 value").fill(HEADER_SECRET)
    remote.headers.clear()
    form.get_by_role("button", name="Register").click()
    expect(page.get_by_role("status").filter(has_text="Registered echo: the tool a2a_echo.")).to_be_visible()
    item = list_box.locator('[data-remote="echo"]')
    expect(item.locator(".a2a-remote-tool")).to_have_text("a2a_echo")
    expect(item).to_contain_text("Echoes what it is sent.")
    expect(item).to_contain_text("v1.2.3")
    expect(item).to_contain_text("streams")
    expect(item.locator("[data-skill=echo]")).to_contain_text("Echo — Says it back.")
    expect(item.locator("[data-skill=echo] .badge")).to_have_text(["test", "echo"])
    expect(item.locator(".a2a-used-by")).to_have_text("Used by: admins")
    expect(item.locator(".a2a-header-names")).to_contain_text("X-Key")
    assert HEADER_SECRET not in page.content()  # write-only: only the name shows
    assert any(seen.get("x-key") == HEADER_SECRET for seen in remote.headers)  # the card was read with it
    expect(form.get_by_label("Name")).to_have_value("")  # the form is ready for the next one
    expect(form.locator(".a2a-header-row")).to_have_count(0)
    for size, label in ((PHONE, "375"), (DESKTOP, "1280")):
        page.set_viewport_size(size)
        assert_fits(page, f"#/a2a with a remote agent at {label} px")
        shot(page, f"a2a-remotes-{label}")

    remote.headers.clear()
    item.get_by_role("button", name="Refresh echo").click()
    expect(page.get_by_role("status").filter(has_text="Read the card of echo again.")).to_be_visible()
    assert any(seen.get("x-key") == HEADER_SECRET for seen in remote.headers)

    item.get_by_role("button", name="Share echo").click()
    dialog = page.get_by_role("dialog", name="Share echo")
    expect(dialog.get_by_label("Everyone")).to_be_visible()
    dialog.get_by_label("Everyone").check()
    dialog.get_by_role("button", name="Save").click()
    expect(item.locator(".a2a-used-by")).to_have_text("Used by: everyone")

    item.get_by_role("button", name="Delete echo").click()
    confirm = page.get_by_role("dialog")
    expect(confirm).to_contain_text("a2a_echo")
    confirm.get_by_role("button", name="Cancel").click()
    expect(item).to_have_count(1)
    item.get_by_role("button", name="Delete echo").click()
    page.get_by_role("dialog").get_by_role("button", name="Delete").click()
    expect(list_box.get_by_text("No remote agent is registered.")).to_be_visible()
    # The refused registrations' 400 and 422 are the console's only lines.
    assert [problem for problem in page.problems if "status of 4" not in problem] == []


def test_a_user_has_no_remote_agents_page(user_page):
    page = user_page
    expect(page.get_by_role("link", name="MCP", exact=True)).to_be_visible()
    expect(page.get_by_role("link", name="A2A", exact=True)).to_have_count(0)
    page.goto("/#/a2a")
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()

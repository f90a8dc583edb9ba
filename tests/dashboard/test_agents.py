"""The Agents page and the chat page's agent picker in a real Chromium, against a real server whose model is the
fake OpenAI upstream (the witness of what an agent sends).

A user makes an agent through the page with a tool and two collections, sees the API's refusals beside the
fields they name (a temperature out of range; a collection deleted meanwhile, on its own row), saves, shares it
with a group as viewer through the share dialog, tries it in the "Try it" chat (the upstream receives its
instructions first, exactly its one tool, and its collection's passage) and restores an older version; a member
of the group sees it read-only. On the chat page, choosing an agent starts the chat with it and an empty chat
offers its starters.

One server for the module; a browser context per person."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from tests.dashboard.conftest import DESKTOP, TIMEOUT_MS, USER_PASSWORD, log_in
from tests.dashboard.test_groups_sharing import Person, register
from tests.fakes.llm import Text

pytestmark = pytest.mark.e2e

HANDBOOK = "Handbook: to reset a password, open the account page and choose Forgotten password; the link lasts an hour."
INSTRUCTIONS = "You are the support desk. Answer from the handbook, in the customer's language."
LATER_INSTRUCTIONS = "You are a pirate. Answer in rhymes."
STARTER = "How do I reset my password?"


@pytest.fixture(scope="module")
def people(dashboard_server) -> dict[str, Person]:
    admin = dashboard_server.login()
    return {"admin": Person(dashboard_server, "admin", admin["token"], int(admin["user"]["id"])),
            "owner": register(dashboard_server, "owner"), "member": register(dashboard_server, "member"),
            "outsider": register(dashboard_server, "outsider")}


@pytest.fixture(scope="module")
def team(people) -> dict:
    """A group with the owner and the member in it (the owner may grant to the groups they belong to)."""
    admin = people["admin"]
    group = admin.json("POST", "/api/groups", json={"name": f"support-{secrets.token_hex(3)}"})
    for person in (people["owner"], people["member"]):
        admin.json("POST", f"/api/groups/{group['id']}/members", json={"user": person.id})
    return group


@pytest.fixture
def open_as(browser, dashboard_server) -> Iterator:
    contexts = []

    def opened(person: Person, password: str = USER_PASSWORD):
        context = browser.new_context(viewport=DESKTOP, base_url=dashboard_server.base_url)
        context.set_default_timeout(TIMEOUT_MS)
        contexts.append(context)
        page = context.new_page()
        page.problems = []
        page.on("pageerror", lambda error: page.problems.append(f"page error: {error}"))
        page.on("console", lambda message: message.type == "error" and page.problems.append(f"console: {message.text}"))
        log_in(page, dashboard_server, person.username, password)
        return page

    yield opened
    for context in contexts:
        context.close()


def agent_by_slug(person: Person, slug: str) -> dict:
    return next(agent for agent in person.json("GET", "/api/agents?limit=200")["results"] if agent["slug"] == slug)


def unexpected(page) -> list[str]:
    """The page's errors other than the console's line for each refused save (a 400 the test asked for)."""
    return [problem for problem in page.problems if "status of 400" not in problem]


def system_text(body: dict) -> str:
    first = body["messages"][0]
    assert first["role"] == "system", body["messages"]
    content = first["content"]
    return content if isinstance(content, str) else " ".join(part.get("text", "") for part in content)


def test_an_agent_made_on_the_page_is_refused_by_field_saved_shared_tried_and_restored(
        chat_upstream, dashboard_server, people, team, open_as, shot):
    owner, member = people["owner"], people["member"]
    handbook = owner.json("POST", "/api/kb/collections", json={"name": f"handbook-{secrets.token_hex(2)}"})
    owner.json("POST", "/api/kb/documents", json={"filename": "handbook.txt", "content": HANDBOOK,
                                                  "collection": handbook["id"]})
    scratch = owner.json("POST", "/api/kb/collections", json={"name": f"scratch-{secrets.token_hex(2)}"})
    slug = f"support-{secrets.token_hex(3)}"

    page = open_as(owner)
    page.get_by_role("link", name="Agents", exact=True).click()
    expect(page.locator('[data-agent-slug="default"]')).to_contain_text("Owner: the deployment")
    page.get_by_label("Slug").fill(slug)
    page.get_by_label("Name", exact=True).fill("Support desk")
    page.get_by_role("button", name="Create agent").click()
    expect(page.locator(".agents-title")).to_have_text("Support desk")
    agent = agent_by_slug(owner, slug)
    assert page.url.endswith(f"#/agents/{agent['id']}") and agent["version"] == 1 and agent["tools"] == []

    page.get_by_label("Instructions").fill(INSTRUCTIONS)
    page.get_by_label("web_fetch").check()
    page.get_by_label(handbook["name"]).check()
    page.get_by_label(scratch["name"]).check()
    page.get_by_label("Starter 1").fill(STARTER)
    page.get_by_label("Temperature").fill("5")
    expect(page.get_by_role("status").filter(has_text="Changes not saved yet.")).to_be_visible()
    page.get_by_role("button", name="Save", exact=True).click()
    # The serializer's refusal, beside the temperature; nothing saved.
    error = page.locator('[data-field="temperature"] .agent-field-error')
    expect(error).to_contain_text("less than or equal to 2")
    expect(page.get_by_label("Temperature")).to_have_attribute("aria-invalid", "true")
    assert agent_by_slug(owner, slug)["version"] == 1

    # A collection deleted after the page listed it: the refusal (`knowledge.1`) is shown on its own row.
    owner.json("DELETE", f"/api/kb/collections/{scratch['id']}")
    page.get_by_label("Temperature").fill("0.3")
    page.get_by_role("button", name="Save", exact=True).click()
    row = page.locator(f'[data-choice="{scratch["id"]}"]')
    expect(row.locator(".agent-field-error")).to_contain_text("No knowledge collection")
    expect(page.locator(f'[data-choice="{handbook["id"]}"] .agent-field-error')).to_have_count(0)
    expect(error).to_be_hidden()
    assert agent_by_slug(owner, slug)["version"] == 1
    row.get_by_role("checkbox").uncheck()
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.get_by_role("status").filter(has_text="All changes saved.")).to_be_visible()
    saved = agent_by_slug(owner, slug)
    assert (saved["version"], saved["instructions"], saved["tools"], saved["knowledge"], saved["temperature"],
            saved["starters"]) == (2, INSTRUCTIONS, ["web_fetch"], [handbook["id"]], 0.3, [STARTER])
    expect(page.locator(".agents-meta")).to_contain_text("Version 2")

    # Shared with the group as viewer, through the share dialog.
    page.get_by_role("button", name="Share", exact=True).click()
    dialog = page.get_by_role("dialog", name="Share Support desk")
    dialog.get_by_label("Shared").check()
    dialog.get_by_label("Group", exact=True).select_option(label=team["name"])
    expect(dialog.get_by_label("As", exact=True)).to_have_value("viewer")
    dialog.get_by_role("button", name="Add grant").click()
    dialog.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".agents-meta")).to_contain_text("Sharing: Shared")
    rule = owner.json("GET", f"/api/agents/{agent['id']}/access")
    assert rule["visibility"] == "shared" and [(grant.get("group"), grant["role"]) for grant in rule["grants"]] \
        == [(team["id"], "viewer")]

    # Tried: the starter sends itself; the upstream gets the instructions first, exactly the one tool, and the
    # handbook's passage.
    chat_upstream.script(Text("Open the account page and choose Forgotten password."))
    seen = len(chat_upstream.bodies())
    trial = page.get_by_role("region", name="Try it")
    trial.get_by_role("button", name=STARTER).click()
    log = trial.get_by_role("log", name="Try-it conversation")
    expect(log.locator("article.message-user")).to_contain_text(STARTER)
    reply = log.locator("article.message-assistant")
    expect(reply).to_have_attribute("data-status", "complete")
    expect(reply.locator(".message-body")).to_have_text("Open the account page and choose Forgotten password.")
    body = chat_upstream.bodies()[seen]
    assert system_text(body).startswith(INSTRUCTIONS), body["messages"][0]
    assert [tool["function"]["name"] for tool in body.get("tools", [])] == ["web_fetch"]
    assert "Forgotten password" in str(body["messages"]), "the collection's passage reaches the model"
    session = next(item for item in owner.json("GET", "/api/sessions?limit=200")["results"]
                   if item["name"] == "Try Support desk")
    assert session["agent"] == slug
    shot(page, "agents-editor-1280")

    # A later edit, then version 2 restored from the history (as version 4).
    page.get_by_label("Instructions").fill(LATER_INSTRUCTIONS)
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".agents-meta")).to_contain_text("Version 3")
    history = page.get_by_role("region", name="Version history")
    history.get_by_role("button", name="View version 2").click()
    expect(history.locator(".agents-version-fields")).to_contain_text(INSTRUCTIONS)
    history.get_by_role("button", name="Restore version 2").click()
    expect(page.locator(".agents-meta")).to_contain_text("Version 4")
    expect(page.get_by_label("Instructions")).to_have_value(INSTRUCTIONS)
    restored = agent_by_slug(owner, slug)
    assert (restored["version"], restored["instructions"]) == (4, INSTRUCTIONS)
    expect(history.locator('[data-version="4"]')).to_contain_text("restore of version 2")
    assert unexpected(page) == []

    # The member sees it, whose it is and that they only view it; the editor is read-only, with no Share,
    # Delete, Save or Restore.
    viewer = open_as(member)
    viewer.get_by_role("link", name="Agents", exact=True).click()
    item = viewer.locator(f'[data-agent-slug="{slug}"]')
    expect(item).to_contain_text(f"Owner: {owner.username}")
    expect(item).to_contain_text("Your role: viewer")
    # Only the A2A panel's buttons (copy its URL, show its card): nothing that changes it.
    expect(item.get_by_role("button")).to_have_count(2)
    expect(item.get_by_role("button", name="A2A card of Support desk", exact=True)).to_be_visible()
    item.get_by_role("link", name="Support desk").click()
    expect(viewer.get_by_text("You may use this agent; only its owner and its editors change it.")).to_be_visible()
    expect(viewer.get_by_label("Instructions")).to_have_value(INSTRUCTIONS)
    expect(viewer.get_by_label("Instructions")).not_to_be_editable()
    expect(viewer.get_by_label("web_fetch")).to_be_disabled()
    expect(viewer.get_by_role("button", name="Save", exact=True)).to_be_hidden()
    expect(viewer.get_by_role("button", name="Share", exact=True)).to_have_count(0)
    expect(viewer.get_by_role("button", name="Delete", exact=True)).to_have_count(0)
    viewer.get_by_role("region", name="Version history").get_by_role("button", name="View version 2").click()
    expect(viewer.locator(".agents-version-fields")).to_contain_text(INSTRUCTIONS)
    expect(viewer.get_by_role("button", name="Restore version 2")).to_have_count(0)
    assert member.call("PATCH", f"/api/agents/{agent['id']}", json={"name": "mine"}).status_code == 403
    assert viewer.problems == []

    # Not shared with the outsider: neither listed nor opened.
    outsider = open_as(people["outsider"])
    outsider.get_by_role("link", name="Agents", exact=True).click()
    expect(outsider.locator('[data-agent-slug="default"]')).to_be_visible()
    expect(outsider.locator(f'[data-agent-slug="{slug}"]')).to_have_count(0)
    outsider.goto(f"/#/agents/{agent['id']}")
    expect(outsider.get_by_role("alert").filter(has_text="There is no such agent")).to_be_visible()


def test_the_owner_deletes_an_agent_but_not_the_default_one(dashboard_server, people, open_as):
    owner = people["owner"]
    slug = f"short-lived-{secrets.token_hex(3)}"
    owner.json("POST", "/api/agents", json={"slug": slug, "name": "Short lived"})
    page = open_as(owner)
    page.get_by_role("link", name="Agents", exact=True).click()
    default = page.locator('[data-agent-slug="default"]')
    # The default agent cannot be deleted: its only buttons are its A2A panel's (copy its URL, show its card).
    expect(default.get_by_role("button", name="A2A card of Default", exact=False)).to_be_visible()
    expect(default.get_by_role("button")).to_have_count(2)
    expect(default.get_by_role("button", name="Delete", exact=False)).to_have_count(0)
    page.get_by_role("button", name="Delete Short lived").click()
    page.get_by_role("dialog").get_by_role("button", name="Delete").click()
    expect(page.locator(f'[data-agent-slug="{slug}"]')).to_have_count(0)
    assert all(agent["slug"] != slug for agent in owner.json("GET", "/api/agents?limit=200")["results"])
    assert page.problems == []


def test_the_chat_picker_starts_a_chat_with_the_agent_and_offers_its_starters(
        chat_upstream, dashboard_server, people, open_as):
    owner = people["owner"]
    slug = f"tutor-{secrets.token_hex(3)}"
    starters = ["Explain photosynthesis", "Quiz me on fractions"]
    owner.json("POST", "/api/agents", json={"slug": slug, "name": "Tutor", "instructions": "You are a patient tutor.",
                                           "starters": starters})
    page = open_as(owner)
    page.goto("/#/chat")
    picker = page.get_by_label("Agent", exact=True)
    expect(picker).to_have_value("default")
    expect(page.get_by_role("group", name="Starters")).to_have_count(0)  # the default agent has none
    picker.select_option(slug)
    group = page.get_by_role("group", name="Starters")
    expect(group.get_by_role("button")).to_have_text(starters)

    chat_upstream.script(Text("Plants turn light into sugar."))
    seen = len(chat_upstream.bodies())
    group.get_by_role("button", name="Explain photosynthesis").click()
    log = page.get_by_role("log", name="Conversation")
    expect(log.locator("article.message-user")).to_contain_text("Explain photosynthesis")
    expect(log.locator("article.message-assistant .message-body")).to_have_text("Plants turn light into sugar.")
    expect(page).to_have_url(re.compile(r"#/chat/[0-9a-f-]{36}$"))
    session_id = page.url.rsplit("/", 1)[1]
    assert owner.json("GET", f"/api/sessions/{session_id}")["agent"] == slug
    assert system_text(chat_upstream.bodies()[seen]).startswith("You are a patient tutor.")

    # The chat shows its agent when opened again; choosing another agent starts a new chat with it.
    page.reload()
    expect(page.get_by_label("Agent", exact=True)).to_have_value(slug)
    expect(page.get_by_role("group", name="Starters")).to_have_count(0)  # not an empty chat
    page.get_by_label("Agent", exact=True).select_option("default")
    expect(page).to_have_url(re.compile(r"#/chat/[0-9a-f-]{36}$"))
    expect(page).not_to_have_url(re.compile(f"#/chat/{session_id}$"))
    fresh = page.url.rsplit("/", 1)[1]
    assert owner.json("GET", f"/api/sessions/{fresh}")["agent"] == "default"
    assert owner.json("GET", f"/api/sessions/{session_id}")["agent"] == slug

    # New chat keeps the chosen agent, and its empty chat offers the starters.
    page.get_by_label("Agent", exact=True).select_option(slug)
    expect(page.get_by_role("group", name="Starters").get_by_role("button")).to_have_text(starters)
    expect(page.get_by_label("Agent", exact=True)).to_have_value(slug)
    assert page.problems == []

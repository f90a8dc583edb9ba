"""Groups and sharing in a real Chromium: an admin makes a group and adds two users with their roles; its
manager (no admin) sees the Groups page and adds a member by id, a plain member does not see it; the owner
shares a knowledge collection with the group as viewer through the share dialog (a bad grant shown on its
row first), and a member sees it with its owner's name, without the buttons that change it, and searches it
with their own collection, each hit naming its collection; a workflow's owner shares it from the list.

One server for the module, one browser context per person (admin, manager, member)."""

from __future__ import annotations

import re
import secrets
import sys
from collections.abc import Iterator

import pytest
import requests
from playwright.sync_api import expect

from tests.dashboard.conftest import DESKTOP, PHONE, TIMEOUT_MS, USER_PASSWORD, log_in
from tests.dashboard.test_layout import assert_fits

pytestmark = pytest.mark.e2e

TIDES = "Tides are caused by the gravitational pull of the moon on the oceans; spring tides come at full moon."
MOON_NOTES = "The moon's pull on the sea makes the tides rise twice a day, a note on the moon and the tides."


class Person:
    def __init__(self, server, username: str, token: str, user_id: int) -> None:
        self.server, self.username, self.token, self.id = server, username, token, user_id

    def call(self, method: str, path: str, **kwargs) -> requests.Response:
        return requests.request(method, f"{self.server.base_url}{path}", timeout=10,
                                headers={"Authorization": f"Bearer {self.token}"}, **kwargs)

    def json(self, method: str, path: str, **kwargs):
        answer = self.call(method, path, **kwargs)
        assert answer.status_code < 300, (method, path, answer.status_code, answer.text)
        return answer.json() if answer.content else None


def register(server, prefix: str) -> Person:
    username = f"{prefix}-{secrets.token_hex(3)}"
    answer = requests.post(f"{server.base_url}/api/auth/register", timeout=10,
                           json={"username": username, "password": USER_PASSWORD})
    answer.raise_for_status()
    body = answer.json()
    return Person(server, username, body["token"], int(body["user"]["id"]))


@pytest.fixture(scope="module")
def people(dashboard_server) -> dict[str, Person]:
    admin = dashboard_server.login()
    return {
        "admin": Person(dashboard_server, "admin", admin["token"], int(admin["user"]["id"])),
        "manager": register(dashboard_server, "manager"),
        "member": register(dashboard_server, "member"),
        "newcomer": register(dashboard_server, "newcomer"),
    }


@pytest.fixture
def open_as(browser, dashboard_server) -> Iterator:
    """A fresh browser context logged in as a person, through the log-in form."""
    contexts = []

    def opened(person: Person, password: str | None = None):
        context = browser.new_context(viewport=DESKTOP, base_url=dashboard_server.base_url)
        context.set_default_timeout(TIMEOUT_MS)
        contexts.append(context)
        page = context.new_page()
        page.problems = []
        page.on("pageerror", lambda error: page.problems.append(f"page error: {error}"))
        page.on("console", lambda message: message.type == "error" and page.problems.append(f"console: {message.text}"))
        log_in(page, dashboard_server, person.username, password or USER_PASSWORD)
        return page

    yield opened
    for context in contexts:
        context.close()


def members_of(person: Person, group_id: int) -> dict[str, str]:
    return {item["user"]["username"]: item["role"] for item in person.json("GET", f"/api/groups/{group_id}/members")}


def group_named(person: Person, name: str) -> dict:
    return next(group for group in person.json("GET", "/api/groups") if group["name"] == name)


@pytest.fixture(scope="module")
def team(people) -> dict:
    """A group made through the API, with the manager as its manager and the member as a member."""
    admin = people["admin"]
    group = admin.json("POST", "/api/groups", json={"name": f"team-{secrets.token_hex(3)}"})
    admin.json("POST", f"/api/groups/{group['id']}/members", json={"user": people["manager"].id, "role": "manager"})
    admin.json("POST", f"/api/groups/{group['id']}/members", json={"user": people["member"].id})
    return group


def test_an_admin_makes_a_group_adds_two_users_with_roles_and_limits_its_models(dashboard_server, people, open_as,
                                                                                shot):
    admin, manager, member = people["admin"], people["manager"], people["member"]
    page = open_as(admin, dashboard_server.admin_password)
    page.get_by_role("link", name="Groups").click()
    name = f"crew-{secrets.token_hex(3)}"
    page.get_by_label("Group name").fill(name)
    page.get_by_label("Description").first.fill("The people who run the crew.")
    page.get_by_role("button", name="Create group").click()
    expect(page.locator("[data-group-name]")).to_have_text(name)
    expect(page.get_by_text("No members yet.")).to_be_visible()
    group = group_named(admin, name)
    assert page.url.endswith(f"#/groups/{group['id']}")

    # By username (looked up in the admins' user list), as a manager; then by id, as a member (the default).
    page.get_by_label("User", exact=True).fill(manager.username)
    page.get_by_label("Member role").select_option("manager")
    page.get_by_role("button", name="Add member").click()
    expect(page.get_by_role("rowheader", name=manager.username)).to_be_visible()
    page.get_by_label("User", exact=True).fill(str(member.id))
    page.get_by_role("button", name="Add member").click()
    expect(page.get_by_role("rowheader", name=member.username)).to_be_visible()
    expect(page.get_by_label(f"Role of {manager.username}")).to_have_value("manager")
    expect(page.get_by_label(f"Role of {member.username}")).to_have_value("member")
    assert members_of(admin, group["id"]) == {manager.username: "manager", member.username: "member"}
    expect(page.locator(f'[data-group-id="{group["id"]}"]')).to_contain_text("2 members")

    # A name nobody has is said so, and nothing is sent.
    page.get_by_label("User", exact=True).fill("nobody-has-this-name")
    page.get_by_role("button", name="Add member").click()
    expect(page.get_by_role("alert").filter(has_text="No user named nobody-has-this-name")).to_be_visible()

    # Promote the member, then put them back; each change is the server's at once.
    page.get_by_label(f"Role of {member.username}").select_option("manager")
    expect(page.get_by_role("status").filter(has_text=f"{member.username} is now a manager")).to_be_visible()
    assert members_of(admin, group["id"])[member.username] == "manager"
    page.get_by_label(f"Role of {member.username}").select_option("member")
    expect(page.get_by_role("status").filter(has_text=f"{member.username} is now a member")).to_be_visible()
    assert members_of(admin, group["id"])[member.username] == "member"

    # The models its members may use: unrestricted (null) until limited.
    assert group["models"] is None
    page.get_by_label("Limit the models its members may use").check()
    page.get_by_label("Allowed models", exact=True).fill("agent\nlocal/*")
    page.get_by_role("button", name="Save group").click()
    expect(page.locator(".groups-models")).to_contain_text("agent, local/*")
    assert group_named(admin, name)["models"] == ["agent", "local/*"]

    # Its budget: every limit the server names, empty for none; set one, the others stay null.
    page.get_by_label(f"Tokens per day for {name}").fill("5000")
    page.get_by_role("button", name="Save budget").click()
    expect(page.get_by_role("status").filter(has_text=f"The budget of {name} saved.")).to_be_visible()
    budget = admin.json("GET", f"/api/groups/{group['id']}/budget")["budget"]
    assert budget["tokens_per_day"] == 5000 and [value for key, value in budget.items() if key != "tokens_per_day"] \
        == [None] * (len(budget) - 1)
    expect(page.locator('[data-limit="tokens_per_day"]')).to_contain_text("0 used, 5000 left")
    shot(page, "groups-admin-1280")
    page.set_viewport_size(PHONE)
    assert_fits(page, "the Groups page at 375 px")
    shot(page, "groups-admin-375")
    page.set_viewport_size(DESKTOP)

    # An MCP server shared with the group through the same dialog: viewer is the only role it offers, and
    # there is no transfer (a server is the deployment's).
    admin.json("POST", "/api/mcp/connect", json={"name": "clock", "command": sys.executable,
                                                 "args": ["-m", "mcp_server_time"]})
    assert all(server["name"] != "clock" for server in member.json("GET", "/api/mcp/servers")["servers"])
    page.get_by_role("link", name="MCP").click()
    page.get_by_role("button", name="Share clock").click()
    dialog = page.get_by_role("dialog", name="Share clock")
    expect(dialog.get_by_label("As", exact=True).locator("option")).to_have_text(["Viewer"])
    expect(dialog.get_by_text("Transfer ownership")).to_have_count(0)
    dialog.get_by_label("Shared").check()
    dialog.get_by_label("Group", exact=True).select_option(label=name)
    dialog.get_by_role("button", name="Add grant").click()
    dialog.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator('tr[data-server="clock"] .mcp-used-by')).to_have_text(f"Used by: admins, group {name}")
    assert [server["name"] for server in member.json("GET", "/api/mcp/servers")["servers"]] == ["clock"]
    admin.json("POST", "/api/mcp/disconnect", json={"name": "clock"})
    page.goto(f"/#/groups/{group['id']}")

    page.get_by_role("button", name="Delete group").click()
    page.get_by_role("dialog").get_by_role("button", name="Delete").click()
    expect(page.locator(f'[data-group-id="{group["id"]}"]')).to_have_count(0)
    assert admin.call("GET", f"/api/groups/{group['id']}").status_code == 404
    assert page.problems == []


def test_a_manager_adds_a_member_by_id_and_a_plain_member_sees_no_groups_page(dashboard_server, people, team,
                                                                              open_as):
    manager, member, newcomer = people["manager"], people["member"], people["newcomer"]
    page = open_as(manager)
    page.get_by_role("link", name="Groups").click()
    expect(page.locator("[data-group-name]")).to_have_text(team["name"])
    # No user lookup for a non-admin: a name is refused, asking for the id; the id adds them.
    page.get_by_label("User id").fill(newcomer.username)
    page.get_by_role("button", name="Add member").click()
    expect(page.get_by_role("alert").filter(has_text="numeric id")).to_be_visible()
    page.get_by_label("User id").fill(str(newcomer.id))
    page.get_by_role("button", name="Add member").click()
    expect(page.get_by_role("rowheader", name=newcomer.username)).to_be_visible()
    assert members_of(manager, team["id"])[newcomer.username] == "member"
    # A manager does not edit the group itself, nor its budget, which they read.
    expect(page.get_by_role("button", name="Save group")).to_have_count(0)
    expect(page.get_by_role("button", name="Save budget")).to_have_count(0)
    expect(page.locator('.groups-budget [data-limit="tokens_per_day"]')).to_contain_text("no limit")
    page.get_by_role("button", name=f"Remove {newcomer.username}").click()
    page.get_by_role("dialog").get_by_role("button", name="Remove").click()
    expect(page.get_by_role("rowheader", name=newcomer.username)).to_have_count(0)
    assert newcomer.username not in members_of(manager, team["id"])
    assert page.problems == []

    people["admin"].json("PUT", f"/api/groups/{team['id']}/budget", json={"tokens_per_day": 7000})
    plain = open_as(member)
    expect(plain.get_by_role("link", name="Knowledge")).to_be_visible()
    expect(plain.get_by_role("link", name="Groups")).to_have_count(0)
    plain.goto("/#/groups")
    expect(plain.get_by_role("heading", name="Not found")).to_be_visible()
    # The group's budget is theirs too: the Usage page says what is left of it.
    plain.get_by_role("link", name="Usage").click()
    expect(plain.locator(".usage-budget")).to_contain_text(f"Group {team['name']}'s budget: Tokens/day 0 used of 7000")
    people["admin"].json("PUT", f"/api/groups/{team['id']}/budget", json={})
    assert plain.problems == []


def collections_of(person: Person) -> list[dict]:
    return person.json("GET", "/api/kb/collections?limit=200")["results"]


def personal_collection(person: Person) -> dict:
    return next(item for item in collections_of(person) if item["personal"])


def test_the_owner_shares_a_collection_with_the_group_and_a_member_reads_and_searches_it(dashboard_server, people,
                                                                                         team, open_as, shot):
    owner, member = people["manager"], people["member"]
    page = open_as(owner)
    page.get_by_role("link", name="Knowledge").click()
    name = f"handbook-{secrets.token_hex(2)}"
    page.get_by_label("Collection name").fill(name)
    page.get_by_role("button", name="Create collection").click()
    expect(page.locator(".kb-collection-name")).to_have_text(name)
    page.get_by_label("Document name").fill("tides.md")
    page.get_by_label("Text", exact=True).fill(TIDES)
    page.get_by_role("button", name="Add text").click()
    expect(page.get_by_role("rowheader", name="tides.md")).to_be_visible()
    collection = next(item for item in collections_of(owner) if item["name"] == name)

    # The dialog: shared with the group as viewer; a user id nobody has is refused on its own row first.
    page.locator(".kb-collection").get_by_role("button", name="Share").click()
    dialog = page.get_by_role("dialog", name=f"Share {name}")
    dialog.get_by_label("Shared").check()
    dialog.get_by_label("Grant to").select_option("group")
    dialog.get_by_label("Group", exact=True).select_option(label=team["name"])
    dialog.get_by_label("As", exact=True).select_option("viewer")
    dialog.get_by_role("button", name="Add grant").click()
    dialog.get_by_label("Grant to").select_option("user")
    dialog.get_by_label("User", exact=True).fill("987654")
    dialog.get_by_role("button", name="Add grant").click()
    shot(page, "share-dialog-1280")
    page.set_viewport_size(PHONE)
    assert_fits(page, "the share dialog at 375 px")
    shot(page, "share-dialog-375")
    page.set_viewport_size(DESKTOP)
    dialog.get_by_role("button", name="Save", exact=True).click()
    bad = dialog.locator('[data-grant="user:987654"]')
    expect(bad.get_by_role("alert")).to_contain_text("No active user with id 987654")
    expect(dialog.locator(f'[data-grant="group:{team["id"]}"] [role="alert"]')).to_have_count(0)
    assert owner.json("GET", f"/api/kb/collections/{collection['id']}/access")["grants"] == []
    dialog.get_by_role("button", name="Remove user #987654").click()
    dialog.get_by_role("button", name="Save", exact=True).click()
    expect(dialog).to_have_count(0)
    rule = owner.json("GET", f"/api/kb/collections/{collection['id']}/access")
    assert rule == {"visibility": "shared", "grants": [{"group": team["id"], "name": team["name"], "role": "viewer"}]}
    assert [problem for problem in page.problems if "status of 400" not in problem] == []  # the refused save

    # The member: the collection with its owner's name, read-only, searched with their own.
    member.json("POST", "/api/kb/documents", json={"filename": "moon-notes.md", "content": MOON_NOTES})  # personal
    reader = open_as(member)
    reader.get_by_role("link", name="Knowledge").click()
    item = reader.locator(f'.kb-collection-item[data-collection-id="{collection["id"]}"]')
    expect(item).to_contain_text(f"owner {owner.username}")
    item.get_by_role("button", name=name).click()
    panel = reader.locator(f'.kb-collection[data-collection-id="{collection["id"]}"]')
    expect(panel.locator(".kb-owner")).to_contain_text(f"Shared with you by {owner.username}")
    expect(panel.get_by_role("rowheader", name="tides.md")).to_be_visible()
    for button in ("Add text", "Upload", "Delete tides.md", "Share", "Rename"):
        expect(panel.get_by_role("button", name=button)).to_have_count(0)
    expect(reader.get_by_label("Document name")).to_have_count(0)

    expect(reader.get_by_label(f"Search {name}")).to_be_checked()
    expect(reader.get_by_label(f"Search {personal_collection(member)['name']}")).to_be_checked()
    reader.get_by_label("Search query").fill("moon tides")
    reader.get_by_role("button", name="Search", exact=True).click()
    hits = reader.locator(".kb-hit")
    expect(hits.filter(has_text="tides.md")).to_contain_text(f"in {name}")
    expect(hits.filter(has_text="moon-notes.md")).to_contain_text(f"in {personal_collection(member)['name']}")
    shot(reader, "knowledge-shared-1280")
    reader.set_viewport_size(PHONE)
    assert_fits(reader, "the Knowledge page with a shared collection at 375 px")
    reader.set_viewport_size(DESKTOP)
    # Unticked, the shared collection is left out of the next search.
    reader.get_by_label(f"Search {name}").uncheck()
    reader.get_by_role("button", name="Search", exact=True).click()
    expect(hits.filter(has_text="moon-notes.md")).to_be_visible()
    expect(hits.filter(has_text="tides.md")).to_have_count(0)
    assert reader.problems == []


def test_a_workflow_owner_shares_it_from_the_list_and_the_member_sees_its_owner(dashboard_server, people, team,
                                                                                open_as):
    owner, member = people["manager"], people["member"]
    name = f"digest-{secrets.token_hex(2)}"
    workflow = owner.json("POST", "/api/workflows", json={"name": name, "nodes": [
        {"id": "input", "type": "input", "name": "input", "config": {}, "position": {"x": 40, "y": 60}}], "edges": []})
    page = open_as(owner)
    page.get_by_role("link", name="Workflows").click()
    page.get_by_role("button", name=f"Share {name}").click()
    dialog = page.get_by_role("dialog", name=f"Share {name}")
    dialog.get_by_label("Shared").check()
    dialog.get_by_label("Group", exact=True).select_option(label=team["name"])
    dialog.get_by_label("As", exact=True).select_option("editor")
    dialog.get_by_role("button", name="Add grant").click()
    dialog.get_by_role("button", name="Save", exact=True).click()
    expect(dialog).to_have_count(0)
    rule = owner.json("GET", f"/api/workflows/{workflow['id']}/access")
    assert rule["grants"] == [{"group": team["id"], "name": team["name"], "role": "editor"}]

    reader = open_as(member)
    reader.get_by_role("link", name="Workflows").click()
    item = reader.locator(f'[data-workflow-id="{workflow["id"]}"]')
    expect(item).to_contain_text(re.compile(rf"owner {re.escape(owner.username)} · editor"))
    expect(item.get_by_role("button", name=f"Share {name}")).to_have_count(0)
    expect(item.get_by_role("button", name=f"Delete {name}")).to_have_count(0)
    # Its editor says whose it is and what the reader may do; sharing and deleting stay with the owner.
    item.get_by_role("link", name=name).click()
    expect(reader.locator(".wf-shared")).to_have_text(
        f"{owner.username} shares this workflow with you as an editor: you may run and change it.")
    expect(reader.get_by_role("button", name="Save", exact=True)).to_be_visible()
    for button in ("Share", "Delete workflow"):
        expect(reader.get_by_role("button", name=button, exact=True)).to_have_count(0)

    # Made a viewer, the member may still move a node on screen, but nothing is sent.
    owner.json("PUT", f"/api/workflows/{workflow['id']}/access", json={
        "visibility": "shared", "grants": [{"group": team["id"], "role": "viewer"}]})
    reader.reload()
    expect(reader.locator(".wf-shared")).to_contain_text("as a viewer: you may run it; your changes are not saved.")
    expect(reader.get_by_role("button", name="Save", exact=True)).to_have_count(0)
    sent = []
    reader.on("request", lambda request: request.method != "GET" and sent.append(request.method))
    reader.locator('.wf-node[data-node-name="input"]').focus()
    reader.keyboard.press("Shift+ArrowRight")
    reader.wait_for_timeout(1200)  # the autosave waits 400 ms after an edit
    assert sent == []
    stored = owner.json("GET", f"/api/workflows/{workflow['id']}")["nodes"][0]["position"]
    assert stored == {"x": 40, "y": 60}

    # The owner hands it over (a non-admin names the new owner by id), after a confirmation.
    page.get_by_role("button", name=f"Share {name}").click()
    dialog = page.get_by_role("dialog", name=f"Share {name}")
    dialog.locator("summary", has_text="Transfer ownership").click()
    dialog.get_by_label("New owner").fill(str(member.id))
    dialog.get_by_role("button", name="Transfer ownership").click()
    page.get_by_role("dialog").filter(has_text=f"Hand {name} over to user #{member.id}?").get_by_role(
        "button", name="Transfer").click()
    expect(page.get_by_role("status").filter(has_text=f"{name} now belongs to {member.username}.")).to_be_visible()
    assert member.json("GET", f"/api/workflows/{workflow['id']}")["owner"]["username"] == member.username
    assert page.problems == [] and reader.problems == []

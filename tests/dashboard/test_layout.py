"""Every dashboard page fits a 375 px phone and a 1280 px desktop with long names in the data, shows all of
its content (nothing cut off, nothing squeezed to a letter a line), and logs no console error; the log-in
form asks a public read whether registration is open, and the site has a favicon."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import requests
from a2a.types import AgentCard, AgentSkill
from playwright.sync_api import expect

from tests.a2a_app.remote_agent import RemoteAgent, Served
from tests.dashboard.conftest import DESKTOP, PHONE, USER_PASSWORD, log_in
from tests.server import LiveServer

pytestmark = pytest.mark.e2e

# Unbroken runs of characters: what real names are (paths, URLs, identifiers), and what wraps worst.
LONG_WORD = "extraordinarily_long_identifier_without_any_space_" * 3
LONG_TEXT = f"Summarise {LONG_WORD} and https://example.com/{'deeply/nested/' * 12}page.html for me"
LONG_USERNAME = "a-person-with-a-very-long-username-" + "x" * 80
PLUGIN_MODULE = "plugin_with_a_long_module_name_that_keeps_going_and_going_and_going"
PLUGIN = f'''
from plugins.sdk import tool


@tool
def {PLUGIN_MODULE}_tool(text: str) -> str:
    """Return the text unchanged ({LONG_WORD})."""
    return text
'''

# Run in the page: what does not fit. Reports (1) elements reaching past the viewport's right edge, (2)
# elements that hide part of their content (overflow hidden, or a box that scrolls sideways; a code block, a
# form field or the workflow canvas may scroll; an ellipsis or a line clamp is fine when a title attribute
# holds the whole text), (3) text squeezed into a column a few characters wide, and the document's own overflow.
MEASURE = """() => {
    const width = document.documentElement.clientWidth;
    const describe = (element) => {
        const name = element.tagName.toLowerCase() + (element.className && typeof element.className === 'string'
            ? '.' + element.className.trim().split(/\\s+/).join('.') : '');
        return `${name} "${(element.textContent || '').trim().slice(0, 40)}"`;
    };
    // Seen by a sighted reader: not in a closed box, nor in one shrunk to a pixel for screen readers only.
    const visible = (element) => {
        if (getComputedStyle(element).visibility === 'hidden') return false;
        if (element.closest('dialog:not([open]), details:not([open]) > :not(summary)')) return false;
        for (let box = element; box; box = box.parentElement) {
            const rect = box.getBoundingClientRect();
            if (rect.width <= 1 || rect.height <= 1) return false;
        }
        return true;
    };
    const scrollsOnPurpose = (element) => element.matches('pre, textarea, input, select, .wf-canvas, .wf-canvas *');
    const outside = [], clipped = [], squeezed = [];
    for (const element of document.body.querySelectorAll('*')) {
        if (!visible(element) || element.matches('.skip-link, .toasts, .toasts *')) continue;
        const rect = element.getBoundingClientRect();
        const style = getComputedStyle(element);
        if (rect.right > width + 1 || rect.left < -1) {
            // Inside a box that scrolls on purpose (a code block, the graph canvas) the box is what counts.
            if (!element.parentElement?.closest('pre, .wf-canvas')) outside.push(describe(element));
        }
        // Cut on purpose: an ellipsis or a line clamp whose title attribute holds the whole text.
        const titled = element.title === element.textContent.trim();
        const hides = ['hidden', 'clip', 'auto', 'scroll'].includes(style.overflowX);
        if (hides && element.scrollWidth > element.clientWidth + 1 && !scrollsOnPurpose(element)) {
            if (!(style.textOverflow === 'ellipsis' && titled)) {
                clipped.push(`${describe(element)}: ${element.clientWidth} of ${element.scrollWidth} px wide`);
            }
        }
        // Boxes that scroll up and down (the conversation, lists) are fine; a box that hides the rest is not.
        if (['hidden', 'clip'].includes(style.overflowY) && element.scrollHeight > element.clientHeight + 1
                && !titled) {
            clipped.push(`${describe(element)}: ${element.clientHeight} of ${element.scrollHeight} px tall`);
        }
        const text = [...element.childNodes].some((node) => node.nodeType === 3 && node.textContent.trim().length > 3);
        const lineHeight = parseFloat(style.lineHeight) || parseFloat(style.fontSize) * 1.3;
        if (text && rect.width < 48 && rect.height > lineHeight * 3.5) {
            squeezed.push(`${describe(element)}: ${Math.round(rect.width)} px wide, ${Math.round(rect.height)} tall`);
        }
    }
    return {overflow: document.documentElement.scrollWidth - width, outside: outside.slice(0, 8),
            clipped: clipped.slice(0, 8), squeezed: squeezed.slice(0, 8)};
}"""


def misfits(page, where: str) -> list[str]:
    """What does not fit on the page as it is now, each named with `where`; empty when everything fits."""
    found = page.evaluate(MEASURE)
    problems = [f"{where}: the page is {found['overflow']} px wider than the screen"] if found["overflow"] > 0 else []
    for kind in ("outside", "clipped", "squeezed"):
        problems += [f"{where}: {kind} {item}" for item in found[kind]]
    return problems


def assert_fits(page, where: str) -> None:
    problems = misfits(page, where)
    assert not problems, "\n".join(problems)


@dataclass
class LongCardAgent(RemoteAgent):
    """A remote A2A agent whose card has the longest names: its own, its description, its skills and their tags."""

    def card(self) -> AgentCard:
        card = super().card()
        card.name = f"Agent {LONG_WORD}"
        card.description = LONG_TEXT
        card.version = LONG_WORD[:40]
        del card.skills[:]
        card.skills.extend(AgentSkill(id=f"{LONG_WORD[:60]}{index}", name=LONG_WORD, description=LONG_TEXT,
                                      tags=[LONG_WORD[:60], "short"]) for index in range(2))
        return card


@pytest.fixture(scope="module")
def long_remote() -> Iterator[RemoteAgent]:
    served = Served(LongCardAgent(name="long")).start()
    yield served.agent
    served.stop()


@pytest.fixture(scope="module")
def dashboard_server() -> Iterator[LiveServer]:
    """The usual server, allowed to reach the remote A2A agent on loopback (registered with long names)."""
    server = LiveServer(command="daphne", env={"AGENTSITE_LOGIN_RATE_LIMIT": "1000",
                                               "AGENTSITE_ALLOW_PRIVATE_FETCH": "1"}).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def long_data(dashboard_server, admin_headers, tmp_path_factory, long_remote) -> dict:
    """Admin-owned data with long unbroken names on every page, and an MCP server started from a long path."""
    base = dashboard_server.base_url

    def call(method: str, path: str, **kwargs) -> dict:
        answer = requests.request(method, f"{base}{path}", headers=admin_headers, timeout=30, **kwargs)
        assert answer.status_code < 300, f"{method} {path}: {answer.status_code} {answer.text}"
        return answer.json() if answer.content else {}

    # A connection and an alias with long names: Settings lists them, the chat's model picker offers them.
    connection = "a-connection-with-a-long-name-" * 2
    call("POST", "/api/connections", json={"name": connection[:64], "provider": "openai", "models": [LONG_WORD[:150]],
                                           "base_url": f"https://example.com/{'deeply/nested/' * 12}v1"})
    call("POST", "/api/aliases", json={"name": LONG_WORD[:100].replace("_", "-"),
                                       "targets": [{"model": f"{connection[:64]}/{LONG_WORD[:150]}"}]})
    session = call("POST", "/api/sessions", json={"name": f"Chat about {LONG_WORD}"[:200],
                                                  "model": LONG_WORD[:100].replace("_", "-")})
    call("POST", "/api/kb/documents", json={"filename": f"{LONG_WORD}.txt"[:255], "content": LONG_TEXT * 3})
    call("POST", "/api/scheduler/tasks", json={"name": f"Task {LONG_WORD}"[:200], "cron": "0 9 * * 1",
                                               "prompt": LONG_TEXT})
    nodes = [{"id": "input", "type": "input", "name": "input", "config": {}, "position": {"x": 40, "y": 60}},
             {"id": "out", "type": "output", "name": LONG_WORD[:64], "config": {"outputFormat": "text"},
              "position": {"x": 300, "y": 60}}]
    workflow = call("POST", "/api/workflows", json={"name": LONG_WORD[:64], "description": LONG_TEXT,
                                                    "nodes": nodes, "edges": [{"from": "input", "to": "out"}]})
    # The server's command: a script in a directory with a long name that starts this Python's MCP time server.
    directory = tmp_path_factory.mktemp("mcp") / ("a-directory-with-a-long-name-for-mcp-servers-" * 2)
    directory.mkdir()
    command = directory / "start-the-time-server"
    command.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m mcp_server_time "$@"\n')
    command.chmod(0o755)
    call("POST", "/api/mcp/connect", json={"name": "clock-with-a-long-server-name-32"[:32], "command": str(command),
                                           "args": ["--local-timezone=America/Argentina/Buenos_Aires"]})
    plugins = dashboard_server.data_dir / "plugins"
    plugins.mkdir(exist_ok=True)
    (plugins / f"{PLUGIN_MODULE}.py").write_text(PLUGIN)
    call("POST", "/api/plugins/reload", json={})
    call("POST", "/api/keys", json={"name": LONG_WORD[:100], "scopes": ["v1", "mcp", "api", "admin"]})
    # A group with the longest name and a long description (the Groups page and a group's own page).
    group = call("POST", "/api/groups", json={"name": LONG_WORD[:64], "description": LONG_WORD * 2,
                                              "models": [LONG_WORD[:150]]})
    # An agent with the longest slug and name, long instructions and starters, the long-named tools (the MCP
    # server's, the workflow's) and a collection with a long name; a second version.
    collection = call("POST", "/api/kb/collections", json={"name": LONG_WORD[:100]})
    tools = ["web_fetch", "clock-with-a-long-server-name-32/get_current_time", f"workflow:{LONG_WORD[:64]}"]
    agent = call("POST", "/api/agents", json={
        "slug": LONG_WORD[:64].replace("_", "-"), "name": f"Agent {LONG_WORD}"[:100], "description": LONG_TEXT,
        "instructions": LONG_TEXT * 4, "tools": tools, "knowledge": [collection["id"]],
        "starters": [f"{index} {LONG_TEXT}"[:500] for index in range(6)]})
    call("PATCH", f"/api/agents/{agent['id']}", json={"description": f"Changed: {LONG_TEXT}"})
    # A remote A2A agent with the longest name, a long URL and header name, and a card of long names.
    call("POST", "/api/a2a/remotes", json={"name": LONG_WORD[:48], "url": f"{long_remote.card_url}?{'q=1&' * 60}x",
                                           "headers": {f"X-{'Long-' * 15}Header": "secret"},
                                           "access": {"visibility": "shared", "grants": [{"group": group["id"],
                                                                                          "role": "viewer"}]}})
    return {"group": group["id"], "session": session["id"], "workflow": workflow["id"], "agent": agent["id"]}


PAGES = [  # (route, something the page shows once loaded)
    ("chat/{session}", "role=heading[name=/Chat about/]"),
    ("agents", f"text={LONG_WORD[:30]}"),
    ("agents/{agent}", ".agents-form[data-ready]"),  # the editor, its pickers' long tool and collection names
    ("knowledge", "text=.txt"),
    ("scheduler", "text=Task extraordinarily"),
    ("workflows", f"text={LONG_WORD[:30]}"),
    ("workflows/{workflow}", ".wf-canvas"),
    ("mcp", f"[data-plugin=\"{PLUGIN_MODULE}\"]"),
    ("a2a", "[data-remote]"),
    ("keys", "[data-key]"),
    ("groups", f"text={LONG_WORD[:30]}"),
    ("groups/{group}", f"text={LONG_WORD[:30]}"),
    ("activity", "[data-event]"),  # the audit log: long connection, alias and key names in targets and details
    ("settings", "role=form[name='Agent configuration']"),
]


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["375", "1280"])
def test_every_page_fits_the_screen_with_long_names(long_data, dashboard_server, page, shot, viewport):
    page.set_viewport_size(viewport)
    log_in(page, dashboard_server, "admin", dashboard_server.admin_password)
    problems = []
    for route, ready in PAGES:
        path = route.format(**long_data)
        page.goto(f"/#/{path}")
        expect(page.locator(ready).first).to_be_visible()
        expect(page.locator("main .loading")).to_have_count(0)
        problems += misfits(page, f"#/{path.split('/')[0]} at {viewport['width']} px")
        shot(page, f"long-{path.split('/')[0]}-{viewport['width']}")
    assert not problems, "\n".join(problems)
    assert page.problems == []


def test_a_long_username_fits_the_top_bar_on_a_phone(dashboard_server, page):
    requests.post(f"{dashboard_server.base_url}/api/auth/register", timeout=10,
                  json={"username": LONG_USERNAME, "password": USER_PASSWORD}).raise_for_status()
    page.set_viewport_size(PHONE)
    log_in(page, dashboard_server, LONG_USERNAME, USER_PASSWORD)
    expect(page.get_by_role("button", name="Log out")).to_be_in_viewport()
    assert_fits(page, "the top bar with a long username")
    assert page.problems == []


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["375", "1280"])
def test_the_log_in_form_reads_the_options_and_logs_no_error(dashboard_server, page, viewport):
    asked = []
    page.on("request", lambda request: asked.append((request.method, request.url.removeprefix(
        dashboard_server.base_url))))
    page.set_viewport_size(viewport)
    page.goto("/")
    expect(page.get_by_role("button", name="Create an account")).to_be_visible()
    page.wait_for_load_state("networkidle")
    assert ("GET", "/api/auth/options") in asked
    assert not [request for request in asked if request[1].startswith("/api/auth/register")], asked
    assert_fits(page, "the log-in form")
    assert page.problems == []


def test_the_site_serves_a_favicon(dashboard_server, page):
    answer = requests.get(f"{dashboard_server.base_url}/favicon.ico", timeout=10, allow_redirects=True)
    assert answer.status_code == 200 and answer.headers["Content-Type"].startswith("image/"), answer.status_code
    page.goto("/")
    icon = page.evaluate("() => document.querySelector('link[rel=icon]').href")
    assert requests.get(icon, timeout=10).status_code == 200, icon
    for path in ("/admin/login/", "/api/docs"):  # pages of ours without a link of their own ask for /favicon.ico
        page.goto(path)
        page.wait_for_load_state("networkidle")
    assert page.problems == []

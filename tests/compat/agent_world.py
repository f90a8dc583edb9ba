"""A deployment with a named agent, for the end-to-end tests of the doors that reach it (/v1 and MCP).

`build(server, admin)` makes, over the real API of a server started by tests.e2e.server_with_fake_upstream:
- `author`, who owns a collection `Handbook` holding PASSAGE and the agent `helper` (INSTRUCTIONS, the one tool
  `web_fetch`, the collection as its knowledge), shared as viewer with the group `team`;
- `member` (in `team`), with an API key of the scopes v1 and mcp, and a dashboard token, whose own personal
  collection holds MEMBER_PASSAGE (which the agent must never see: it does not name that collection);
- `outsider` (in no group), with the same;
- `intern`, in `team` and in `interns`, a group whose models are ["fast"].
The fake upstream's recorded requests are the witness of what each door sent; `Recording`, a metering, of the
usage each call records (tests without a server), and the fixtures `metering` (a Recording in place) and `helper`
(the config pointed at the fake upstream, and the owner's agent `helper` with no tools) that those tests share.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import requests

from agents_app.services import agent_create
from agentsite.agent.usage import Caller, CallRecord, get_metering, set_metering
from catalogue.services import config_update


class Recording:
    """A Metering that refuses nothing and keeps every call's record."""

    def __init__(self) -> None:
        self.records: list[CallRecord] = []

    async def check(self, caller: Caller) -> None:
        return None

    async def admit(self, caller: Caller, model: str, *, prompt_tokens: int = 0,
                    max_tokens: int | None = None) -> object | None:
        return None

    def record(self, record: CallRecord, ticket: object | None) -> None:
        self.records.append(record)


PASSWORD = "correct-horse-battery-9"
INSTRUCTIONS = "You are Helper, the support agent of the pelican harbour. Answer in French."
PASSAGE = "The night gate of the pelican harbour opens with the code heron-7731."
MEMBER_PASSAGE = "The night gate of the pelican harbour also opens with the member code gull-0042."
QUESTION = "What code opens the night gate of the pelican harbour?"
SLUG = "helper"
MODEL = f"agent:{SLUG}"
TOOL = "web_fetch"


@dataclass
class Person:
    id: int
    token: str
    key: str = ""

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@dataclass
class World:
    base_url: str
    admin: dict[str, str]
    author: Person
    member: Person
    outsider: Person
    intern: Person
    agent_id: int
    collection_id: str
    team_id: int
    interns_id: int
    extra: dict[str, Any] = field(default_factory=dict)

    def call(self, method: str, path: str, headers: dict[str, str], body: Any = None,
             expect: int | None = None) -> requests.Response:
        response = requests.request(method, self.base_url + path, headers=headers, json=body, timeout=30)
        if expect is not None:
            assert response.status_code == expect, (method, path, response.status_code, response.text)
        return response


def _post(base_url: str, path: str, headers: dict[str, str], body: Any) -> dict[str, Any]:
    response = requests.post(base_url + path, headers=headers, json=body, timeout=30)
    assert response.status_code in (200, 201), (path, response.status_code, response.text)
    return response.json()


def person(base_url: str, username: str, *, key: bool = True) -> Person:
    """A new user (registered), their token, and an API key of the scopes v1 and mcp."""
    made = _post(base_url, "/api/auth/register", {}, {"username": username, "password": PASSWORD})
    someone = Person(int(made["user"]["id"]), made["token"])
    if key:
        someone.key = _post(base_url, "/api/keys", someone.headers, {"name": "sdk", "scopes": ["v1", "mcp"]})["key"]
    return someone


def build(base_url: str, admin: dict[str, str]) -> World:
    author = person(base_url, "author")
    collection = _post(base_url, "/api/kb/collections", author.headers, {"name": "Handbook"})
    _post(base_url, "/api/kb/documents", author.headers,
          {"filename": "gate.md", "content": PASSAGE, "collection": collection["id"]})
    agent = _post(base_url, "/api/agents", author.headers, {
        "slug": SLUG, "name": "Helper", "instructions": INSTRUCTIONS, "tools": [TOOL],
        "knowledge": [collection["id"]]})
    team = _post(base_url, "/api/groups", admin, {"name": "team"})
    interns = _post(base_url, "/api/groups", admin, {"name": "interns", "models": ["fast"]})
    member, outsider, intern = (person(base_url, name) for name in ("member", "outsider", "intern"))
    _post(base_url, "/api/kb/documents", member.headers, {"filename": "mine.md", "content": MEMBER_PASSAGE})
    for group, user in ((team, member), (team, intern), (interns, intern)):
        _post(base_url, f"/api/groups/{group['id']}/members", admin, {"user": user.id})
    shared = requests.put(f"{base_url}/api/agents/{agent['id']}/access", headers=author.headers, timeout=30,
                          json={"visibility": "shared", "grants": [{"group": team["id"], "role": "viewer"}]})
    assert shared.status_code == 200, shared.text
    return World(base_url, admin, author, member, outsider, intern, int(agent["id"]), str(collection["id"]),
                 int(team["id"]), int(interns["id"]))


def first_system(body: dict[str, Any]) -> str:
    """The first message of an OpenAI-format upstream request, which must be a system message: its text."""
    first = body["messages"][0]
    assert first["role"] == "system", body["messages"]
    content = first["content"]
    return content if isinstance(content, str) else "".join(part.get("text", "") for part in content)


def tool_names(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools") or []]


def assert_the_agent_was_sent(body: dict[str, Any], *, caller_system: str | None = None) -> None:
    """What every door must send upstream for `helper`: its instructions first (then the passage its knowledge
    found, in the same system message, and nothing of the caller's own collections), exactly its one tool, and
    the caller's own system message after it."""
    system = first_system(body)
    assert system.startswith(INSTRUCTIONS), system
    assert PASSAGE in system, system
    assert "gull-0042" not in str(body["messages"]), body["messages"]
    assert tool_names(body) == [TOOL], body.get("tools")
    if caller_system is not None:
        second = body["messages"][1]
        assert (second["role"], second["content"]) == ("system", caller_system), body["messages"]


@pytest.fixture
def metering():
    before = get_metering()
    recording = Recording()
    set_metering(recording)
    yield recording
    set_metering(before)


@pytest.fixture
def helper(owner, fake_openai):
    config_update(changes={"provider": "openai", "base_url": fake_openai.base_url, "api_key": "sk-x",
                           "model": "fake-model", "kb_enabled": False})
    return agent_create(owner=owner, data={"slug": "helper", "name": "Helper", "instructions": "You are Helper.",
                                           "tools": [], "temperature": 0.1})

"""An MCP server shared with a group, through every door a member uses (issue 44, item 2): one live server (daphne,
its agent pointed at the fake OpenAI upstream) and the stdio server `vault`, connected private and then granted
to the group `vault-team` as viewer through PUT /api/mcp/servers/vault/access. The member sees it in the
listing, gets its tools in /api/mcp/tools and in the agent's tool list, and calls one; an outsider finds none of
it; once removed from the group, the member loses it on the next request.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import requests

from tests.e2e import server_with_fake_upstream
from tests.mcpbridge.conftest import FRAGILE_SERVER, Api
from tests.mcpbridge.test_visibility import (
    SECRET,
    TOOL,
    error_of,
    offered_tools,
    register,
    script_a_call_of_the_vault,
    tool_message,
    vault_listed,
)
from tests.server import LiveServer

pytestmark = pytest.mark.e2e  # every test here starts a process

CALL = {"server": "vault", "tool": "env", "arguments": {"name": "VAULT_SECRET"}}


@dataclass
class Team:
    server: LiveServer
    admin: Api
    member: Api
    outsider: Api
    member_id: int
    group_id: int


def user_id(api: Api) -> int:
    return int(api.get("/api/auth/me").json()["id"])


@pytest.fixture(scope="module")
def team(fake_openai_server) -> Iterator[Team]:
    server, headers = server_with_fake_upstream(fake_openai_server)
    admin = Api(server.base_url, headers["Authorization"].removeprefix("Bearer "))
    member, outsider = register(server, "team-member"), register(server, "team-outsider")
    connected = admin.post("/api/mcp/connect", {"name": "vault", "command": FRAGILE_SERVER[0],
                                                "args": FRAGILE_SERVER[1:], "env": {"VAULT_SECRET": SECRET}})
    assert connected.status_code == 201 and connected.json()["visibility"] == "private", connected.text
    group = admin.post("/api/groups", {"name": "vault-team"})
    assert group.status_code == 201, group.text
    yield Team(server, admin, member, outsider, user_id(member), group.json()["id"])
    server.stop()


def share(team: Team, role: str = "viewer") -> requests.Response:
    return requests.put(f"{team.server.base_url}/api/mcp/servers/vault/access", headers=team.admin.headers,
                        json={"visibility": "shared", "grants": [{"group": team.group_id, "role": role}]}, timeout=30)


def join(team: Team) -> None:
    joined = team.admin.post(f"/api/groups/{team.group_id}/members", {"user": team.member_id})
    assert joined.status_code == 201, joined.text


def leave(team: Team) -> None:
    left = requests.delete(f"{team.server.base_url}/api/groups/{team.group_id}/members/{team.member_id}",
                           headers=team.admin.headers, timeout=30)
    assert left.status_code == 204, left.text


def tools_of(api: Api) -> set[tuple[str, str]]:
    response = api.get("/api/mcp/tools")
    assert response.status_code == 200, response.text
    return {(item["server"], item["tool"]["name"]) for item in response.json()["tools"]}


def agent_offers_the_vault(team: Team, api: Api, fake_openai) -> bool:
    fake_openai.reset()  # this run's requests only
    script_a_call_of_the_vault(fake_openai)
    response = requests.post(f"{team.server.base_url}/v1/chat/completions", headers=api.headers, timeout=60,
                             json={"model": "agent", "messages": [{"role": "user", "content": "Read the vault."}]})
    assert response.status_code == 200, response.text
    offered = TOOL in offered_tools(fake_openai)
    assert (SECRET in tool_message(fake_openai)) is offered
    return offered


def test_an_editor_grant_is_refused_with_400_naming_the_role(team):
    response = share(team, role="editor")

    assert error_of(response) == (400, "invalid")
    assert "viewer only" in response.json()["error"]["message"]
    assert "grants.0.role" in response.json()["error"]["details"]
    assert team.admin.get("/api/mcp/servers/vault/access").json() == {"visibility": "private", "grants": []}


def test_a_member_of_the_granted_group_sees_lists_and_calls_the_server_until_removed_from_the_group(team,
                                                                                                   fake_openai):
    assert share(team).status_code == 200
    join(team)
    try:
        listed = vault_listed(team.member)
        assert listed is not None and listed["tools"] == 3 and "grants" not in listed
        assert ("vault", "env") in tools_of(team.member)
        assert agent_offers_the_vault(team, team.member, fake_openai)
        called = team.member.post("/api/mcp/call", CALL)
        assert called.status_code == 200, called.text
        assert called.json()["content"] == [{"type": "text", "text": f"VAULT_SECRET={SECRET}"}]

        leave(team)

        # The very next request, with the same token: no cache kept the group's grant.
        assert vault_listed(team.member) is None
        assert error_of(team.member.post("/api/mcp/call", CALL)) == (404, "not_found")
        assert ("vault", "env") not in tools_of(team.member)
        assert not agent_offers_the_vault(team, team.member, fake_openai)
    finally:
        team.admin.post(f"/api/groups/{team.group_id}/members", {"user": team.member_id})  # 409 if still there


def test_an_outsider_finds_neither_the_server_nor_its_tools_nor_its_rule(team, fake_openai):
    assert share(team).status_code == 200

    assert vault_listed(team.outsider) is None
    assert ("vault", "env") not in tools_of(team.outsider)
    assert not agent_offers_the_vault(team, team.outsider, fake_openai)
    assert error_of(team.outsider.post("/api/mcp/call", CALL)) == (404, "not_found")
    assert error_of(team.outsider.get("/api/mcp/servers/vault/access")) == (404, "not_found")

"""Who may use an MCP server an admin connects, through every door (issue 23, item 5).

One live server (daphne, its agent pointed at the fake OpenAI upstream) and one stdio server, `vault`, started
with an admin's secrets in its env and args and open to one named user. Each door is tried as the admin, as
the user the rule names (`insider`) and as a user outside it (`outsider`): the listing, /api/mcp/tools,
/api/mcp/call, chat, /v1's agent, a workflow's tool node (saved and run) and this service's own /mcp.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import requests
from mcp.shared.exceptions import MCPError

from tests.e2e import server_with_fake_upstream, sse_events
from tests.fakes.llm import Call, Text, ToolCalls
from tests.mcpbridge.conftest import FRAGILE_SERVER, Api
from tests.mcpbridge.test_server import http_session, text_of
from tests.server import LiveServer

pytestmark = pytest.mark.e2e  # every test here starts a process

SECRET = "vault-env-s3cret-7f3a"
ARG_TOKEN = "--token=vault-arg-t0ken-91c2"
TOOL = "vault__env"
PASSWORD = "correct-horse-battery-9"


@dataclass
class Site:
    server: LiveServer
    admin: Api
    insider: Api
    outsider: Api
    connected: requests.Response

    def caller(self, who: str) -> Api:
        return getattr(self, who)


def register(server: LiveServer, username: str) -> Api:
    response = requests.post(f"{server.base_url}/api/auth/register", json={"username": username, "password": PASSWORD},
                             timeout=10)
    assert response.status_code == 201, response.text
    return Api(server.base_url, response.json()["token"])


@pytest.fixture(scope="module")
def site(fake_openai_server) -> Iterator[Site]:
    server, headers = server_with_fake_upstream(fake_openai_server)
    admin = Api(server.base_url, headers["Authorization"].removeprefix("Bearer "))
    insider, outsider = register(server, "vault-reader"), register(server, "vault-stranger")
    connected = admin.post("/api/mcp/connect", {
        "name": "vault", "command": FRAGILE_SERVER[0], "args": [*FRAGILE_SERVER[1:], ARG_TOKEN],
        "env": {"VAULT_SECRET": SECRET}, "visibility": "users", "users": ["vault-reader"]})
    assert connected.status_code == 201, connected.text
    yield Site(server, admin, insider, outsider, connected)
    server.stop()


CALLERS = [("admin", True), ("insider", True), ("outsider", False)]


def error_of(response: requests.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


def vault_listed(api: Api) -> dict | None:
    response = api.get("/api/mcp/servers")
    assert response.status_code == 200, response.text
    return next((server for server in response.json()["servers"] if server["name"] == "vault"), None)


def assert_no_secret(text: str) -> None:
    assert SECRET not in text and "vault-arg-t0ken" not in text


# --- the server's record ----------------------------------------------------------------------------

def test_connect_answers_the_server_with_args_and_env_shown_only_as_a_count_and_names(site):
    assert site.connected.json() == {
        "name": "vault", "transport": "stdio", "command": sys.executable, "args_count": 2,
        "env_keys": ["VAULT_SECRET"], "visibility": "shared", "auth": "none", "oauth": None, "status": "connected",
        "grants": [{"user": int(site.insider.get("/api/auth/me").json()["id"]), "name": "vault-reader",
                    "role": "viewer"}],
        "error": "", "tools": 3}


def test_the_listing_shows_the_server_to_admins_with_its_rule_to_the_user_it_names_without_and_to_no_one_else(site):
    as_admin, as_insider = vault_listed(site.admin), vault_listed(site.insider)

    assert as_admin == site.connected.json()
    assert as_insider == {"name": "vault", "transport": "stdio", "command": sys.executable, "args_count": 2,
                          "auth": "none", "oauth": None, "status": "connected", "error": "", "tools": 3}
    assert vault_listed(site.outsider) is None
    for api in (site.admin, site.insider, site.outsider):
        assert_no_secret(api.get("/api/mcp/servers").text)


@pytest.mark.parametrize(("who", "allowed"), CALLERS)
def test_the_tool_listing_has_the_servers_tools_for_the_callers_its_rule_lets_in(site, who, allowed):
    response = site.caller(who).get("/api/mcp/tools")
    assert response.status_code == 200
    pairs = {(item["server"], item["tool"]["name"]) for item in response.json()["tools"]}

    assert (("vault", "env") in pairs) is allowed
    assert (("builtin", "computer_screenshot") in pairs) is (who == "admin")
    assert ("builtin", "web_fetch") in pairs


# --- /api/mcp/call ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("who", "allowed"), CALLERS)
def test_api_mcp_call_runs_the_servers_tool_only_for_the_callers_its_rule_lets_in(site, who, allowed):
    api = site.caller(who)
    response = api.post("/api/mcp/call", {"server": "vault", "tool": "env", "arguments": {"name": "VAULT_SECRET"}})

    if allowed:
        assert response.status_code == 200, response.text
        assert response.json() == {"content": [{"type": "text", "text": f"VAULT_SECRET={SECRET}"}], "is_error": False}
        return
    unknown = api.post("/api/mcp/call", {"server": "no-vault", "tool": "env", "arguments": {"name": "VAULT_SECRET"}})
    assert error_of(response) == error_of(unknown) == (404, "not_found")
    assert response.json()["error"]["details"].keys() == unknown.json()["error"]["details"].keys()
    assert_no_secret(response.text)


def test_the_screenshot_tool_is_not_callable_by_a_user_through_api_mcp_call(site):
    response = site.outsider.post("/api/mcp/call", {"server": "builtin", "tool": "computer_screenshot",
                                                    "arguments": {}})
    assert error_of(response) == (404, "not_found")


# --- the agent: chat and /v1 ----------------------------------------------------------------------------

def script_a_call_of_the_vault(fake) -> None:
    fake.script(ToolCalls([Call(TOOL, {"name": "VAULT_SECRET"}, id="call_vault")]), Text("Done."))


def offered_tools(fake) -> set[str]:
    return {tool["function"]["name"] for tool in fake.bodies()[0].get("tools", [])}


def tool_message(fake) -> str:
    return next(message["content"] for message in fake.bodies()[1]["messages"] if message["role"] == "tool")


@pytest.mark.parametrize(("who", "allowed"), CALLERS)
def test_chat_offers_and_runs_the_servers_tools_only_for_the_callers_its_rule_lets_in(site, fake_openai, who,
                                                                                      allowed):
    api = site.caller(who)
    script_a_call_of_the_vault(fake_openai)
    session = api.post("/api/sessions", {"name": "vault"}).json()["id"]

    with requests.post(f"{site.server.base_url}/api/sessions/{session}/chat", json={"message": "Read the vault."},
                       headers=api.headers, stream=True, timeout=60) as response:
        assert response.status_code == 200, response.text
        events = [(name, data) for name, data in sse_events(response) if name != "comment"]

    assert events[-1][0] == "done", events
    result = next(data for name, data in events if name == "tool_result")
    assert (TOOL in offered_tools(fake_openai)) is allowed
    assert ("computer_screenshot" in offered_tools(fake_openai)) is (who == "admin")
    if allowed:
        assert result["is_error"] is False and result["content"] == f"VAULT_SECRET={SECRET}"
    else:
        assert result["is_error"] is True and f"There is no tool named {TOOL!r}" in result["content"]
        assert_no_secret(str(events) + tool_message(fake_openai))


@pytest.mark.parametrize(("who", "allowed"), CALLERS)
def test_the_v1_agent_offers_and_runs_the_servers_tools_only_for_the_callers_its_rule_lets_in(site, fake_openai,
                                                                                             who, allowed):
    api = site.caller(who)
    script_a_call_of_the_vault(fake_openai)

    response = requests.post(f"{site.server.base_url}/v1/chat/completions", headers=api.headers, timeout=60,
                             json={"model": "agent", "messages": [{"role": "user", "content": "Read the vault."}]})

    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "Done."
    assert (TOOL in offered_tools(fake_openai)) is allowed
    assert ("computer_screenshot" in offered_tools(fake_openai)) is (who == "admin")
    if allowed:
        assert SECRET in tool_message(fake_openai)
    else:
        assert f"There is no tool named {TOOL!r}" in tool_message(fake_openai)
        assert_no_secret(tool_message(fake_openai))


# --- workflows --------------------------------------------------------------------------------------------

def tool_workflow(api: Api, name: str, tool_name: str) -> requests.Response:
    return api.post("/api/workflows", {"name": name, "edges": [{"from": "start", "to": "read"}], "nodes": [
        {"id": "start", "name": "start", "type": "input", "config": {}},
        {"id": "read", "name": "read", "type": "tool", "config": {"toolName": tool_name,
                                                                  "toolArgs": {"name": "VAULT_SECRET"}}}]})


@pytest.mark.parametrize(("who", "allowed"), CALLERS)
def test_a_workflow_tool_node_runs_the_servers_tool_only_for_owners_its_rule_lets_in(site, who, allowed):
    api = site.caller(who)
    saved = tool_workflow(api, f"vault-{who}", TOOL)
    unknown = tool_workflow(api, f"unknown-{who}", "no-vault__env")
    # Saving tells a hidden tool from an unknown one in no way: both are stored (a tool is looked up at run time).
    assert saved.status_code == unknown.status_code == 201, saved.text

    run = api.post(f"/api/workflows/{saved.json()['id']}/run", {"input": "go"})

    assert run.status_code == 200, run.text
    if allowed:
        assert run.json()["status"] == "success" and run.json()["outputs"]["read"] == f"VAULT_SECRET={SECRET}"
    else:
        failed = api.post(f"/api/workflows/{unknown.json()['id']}/run", {"input": "go"}).json()
        assert run.json()["status"] == failed["status"] == "error"
        assert f"There is no tool named {TOOL!r}" in run.json()["error"]["message"]
        assert_no_secret(run.text)


# --- this service's own /mcp ------------------------------------------------------------------------------

@pytest.mark.parametrize("who", ["admin", "insider", "outsider"])
async def test_the_mcp_endpoint_serves_the_screenshot_to_admins_only_and_no_external_servers_tools(site, who):
    async with http_session(site.server.base_url + "/mcp", site.caller(who).token) as session:
        tools = {tool.name for tool in (await session.list_tools()).tools}
        try:
            answer = text_of(await session.call_tool("computer_screenshot", {}))
        except MCPError as exc:
            answer = f"MCPError: {exc}"

    assert "web_fetch" in tools and not any(name.startswith("vault") for name in tools)
    assert ("computer_screenshot" in tools) is (who == "admin")
    # The admin's call runs (this server has no display: the tool says so); a user's is an unknown tool.
    assert ("Unknown tool: computer_screenshot" in answer) is (who != "admin")


# --- changing the rule ------------------------------------------------------------------------------------

def test_an_admin_opens_the_server_to_everyone_and_closes_it_to_admins_and_every_door_follows(site):
    try:
        opened = site.admin.patch("/api/mcp/servers/vault", {"visibility": "everyone"})
        assert opened.status_code == 200, opened.text
        assert opened.json()["visibility"] == "everyone" and opened.json()["grants"] == []
        assert vault_listed(site.outsider) is not None
        called = site.outsider.post("/api/mcp/call", {"server": "vault", "tool": "env", "arguments": {"name": "X"}})
        assert called.status_code == 200, called.text

        closed = site.admin.patch("/api/mcp/servers/vault", {"visibility": "admins"})
        assert closed.status_code == 200 and closed.json()["visibility"] == "private"
        assert vault_listed(site.insider) is None and vault_listed(site.admin) is not None
        refused = site.insider.post("/api/mcp/call", {"server": "vault", "tool": "env", "arguments": {"name": "X"}})
        assert error_of(refused) == (404, "not_found")
    finally:
        restored = site.admin.patch("/api/mcp/servers/vault", {"visibility": "users", "users": ["vault-reader"]})
        assert restored.status_code == 200, restored.text


@pytest.mark.parametrize(("body", "field"), [({"visibility": "users"}, "users"),
                                              ({"visibility": "admins", "users": ["vault-reader"]}, "users"),
                                              ({"visibility": "users", "users": ["nobody-by-this-name"]}, "users"),
                                              ({"visibility": "friends"}, "visibility")])
def test_a_rule_that_does_not_make_sense_answers_400_naming_the_field(site, body, field):
    response = site.admin.patch("/api/mcp/servers/vault", body)
    assert error_of(response) == (400, "invalid")
    assert field in response.json()["error"]["details"]
    assert [grant["name"] for grant in vault_listed(site.admin)["grants"]] == ["vault-reader"]


def test_only_an_admin_changes_a_rule_and_an_unknown_server_answers_404(site):
    assert error_of(site.insider.patch("/api/mcp/servers/vault", {"visibility": "everyone"})) == (403, "forbidden")
    assert error_of(site.admin.patch("/api/mcp/servers/no-vault", {"visibility": "everyone"})) == (404, "not_found")

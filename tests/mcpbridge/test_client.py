"""This service as an MCP client, end to end: a running server connects real MCP servers over stdio and HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from tests.mcpbridge.conftest import FRAGILE_SERVER, TIME_SERVER, Api, alive, processes_running, wait_until

pytestmark = pytest.mark.e2e  # every test here starts a process

PAGE = "<html><body><p>The ferry leaves at nine.</p></body></html>"


def connect(api: Api, name: str, **spec) -> requests.Response:
    return api.post("/api/mcp/connect", {"name": name, **spec})


def stdio_spec(argv: list[str]) -> dict:
    return {"command": argv[0], "args": argv[1:]}


def error_code(response: requests.Response) -> str:
    return response.json()["error"]["code"]


def servers(api: Api) -> dict[str, dict]:
    response = api.get("/api/mcp/servers")
    assert response.status_code == 200
    return {server["name"]: server for server in response.json()["servers"]}


@pytest.fixture(scope="module")
def time_server(admin_api: Api) -> Iterator[dict]:
    response = connect(admin_api, "time", **stdio_spec(TIME_SERVER), env={"TIME_SECRET": "s3cret"},
                       visibility="everyone")
    assert response.status_code == 201, response.text
    yield response.json()
    admin_api.post("/api/mcp/disconnect", {"name": "time"})


def test_connect_starts_a_stdio_server_lists_its_tools_and_stores_it_without_its_env(admin_api, time_server):
    assert time_server == {"name": "time", "transport": "stdio", "command": TIME_SERVER[0], "args_count": 2,
                           "env_keys": ["TIME_SECRET"], "visibility": "everyone", "grants": [],
                           "auth": "none", "oauth": None, "status": "connected", "error": "", "tools": 2}
    listed = servers(admin_api)["time"]
    assert listed == time_server
    assert "s3cret" not in admin_api.get("/api/mcp/servers").text


def test_the_tool_list_names_builtin_and_external_tools_by_their_server(user_api, time_server):
    response = user_api.get("/api/mcp/tools")
    assert response.status_code == 200
    pairs = {(item["server"], item["tool"]["name"]) for item in response.json()["tools"]}
    assert {("builtin", "web_fetch"), ("builtin", "web_search"), ("builtin", "kb_search"),
            ("time", "get_current_time"), ("time", "convert_time")} <= pairs
    assert ("builtin", "computer_screenshot") not in pairs  # an admin's tool (AGENTSITE_ADMIN_ONLY_TOOLS)
    current = next(item["tool"] for item in response.json()["tools"] if item["tool"]["name"] == "get_current_time")
    assert current["inputSchema"]["required"] == ["timezone"] and current["description"]


def test_a_user_calls_an_external_tool_open_to_everyone_through_api_mcp_call(user_api, time_server):
    response = user_api.post("/api/mcp/call", {"server": "time", "tool": "get_current_time",
                                               "arguments": {"timezone": "Europe/Paris"}})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["is_error"] is False
    assert body["content"][0]["type"] == "text" and "Europe/Paris" in body["content"][0]["text"]


def test_an_external_tools_own_error_comes_back_as_an_error_result(user_api, time_server):
    response = user_api.post("/api/mcp/call", {"server": "time", "tool": "get_current_time",
                                               "arguments": {"timezone": "Not/AZone"}})
    assert response.status_code == 200
    assert response.json()["is_error"] is True


def test_arguments_that_do_not_fit_the_tools_input_schema_answer_400(user_api, time_server):
    response = user_api.post("/api/mcp/call", {"server": "time", "tool": "get_current_time", "arguments": {}})
    assert response.status_code == 400
    assert error_code(response) == "invalid"


@pytest.mark.parametrize(("server", "tool"), [("time", "no_such_tool"), ("no-such-server", "get_current_time"),
                                              ("builtin", "no_such_tool")])
def test_calling_an_unknown_server_or_tool_answers_404(user_api, time_server, server, tool):
    response = user_api.post("/api/mcp/call", {"server": server, "tool": tool, "arguments": {}})
    assert response.status_code == 404
    assert error_code(response) == "not_found"


def test_a_builtin_tool_is_called_through_api_mcp_call_too(user_api, fake_web):
    fake_web.page("/ferry", PAGE)
    response = user_api.post("/api/mcp/call", {"server": "builtin", "tool": "web_fetch",
                                               "arguments": {"url": fake_web.url("/ferry")}})
    assert response.status_code == 200
    assert response.json()["is_error"] is False and "ferry leaves at nine" in response.json()["content"][0]["text"]


def test_connecting_a_taken_name_answers_409_and_leaves_the_first_server_alone(admin_api, time_server):
    response = connect(admin_api, "time", **stdio_spec(FRAGILE_SERVER))
    assert response.status_code == 409
    assert error_code(response) == "conflict"
    assert servers(admin_api)["time"]["tools"] == 2


def test_connecting_and_disconnecting_needs_an_admin(user_api, time_server):
    connected = connect(user_api, "mine", **stdio_spec(TIME_SERVER))
    disconnected = user_api.post("/api/mcp/disconnect", {"name": "time"})
    assert (connected.status_code, error_code(connected)) == (403, "forbidden")
    assert (disconnected.status_code, error_code(disconnected)) == (403, "forbidden")


def test_disconnect_stops_the_server_process_with_its_children_and_forgets_it(live, admin_api):
    before = processes_running("mcp_server_time", under=live.proc.pid)
    assert connect(admin_api, "clock", **stdio_spec(TIME_SERVER)).status_code == 201
    spawned = processes_running("mcp_server_time", under=live.proc.pid) - before
    assert spawned, "the connected stdio server is not running under the live server"
    response = admin_api.post("/api/mcp/disconnect", {"name": "clock"})
    assert response.status_code == 200
    assert response.json() == {"name": "clock", "status": "disconnected"}
    assert "clock" not in servers(admin_api)
    wait_until(lambda: not (spawned & processes_running("mcp_server_time", under=live.proc.pid)),
               "the disconnected server's process still runs")


def test_disconnect_also_stops_what_the_server_started_even_when_the_server_exits_on_its_own(live, admin_api):
    assert connect(admin_api, "family", **stdio_spec([*FRAGILE_SERVER, "--with-child"])).status_code == 201
    children = processes_running("fragile-child", under=live.proc.pid)
    assert children, "the server's child process is not running"
    assert admin_api.post("/api/mcp/disconnect", {"name": "family"}).status_code == 200
    wait_until(lambda: not any(alive(pid) for pid in children), "the server's child outlived the disconnect")


def test_disconnecting_an_unknown_name_answers_404(admin_api):
    response = admin_api.post("/api/mcp/disconnect", {"name": "never-connected"})
    assert response.status_code == 404
    assert error_code(response) == "not_found"


def test_a_server_that_fails_to_start_answers_502_with_its_stderr_and_is_not_stored(admin_api):
    response = connect(admin_api, "broken", **stdio_spec([*FRAGILE_SERVER, "--fail-at-start"]))
    assert response.status_code == 502
    assert error_code(response) == "mcp_connect_failed"
    assert "FRAGILE_TOKEN is not set" in response.json()["error"]["message"]
    assert "broken" not in servers(admin_api)


def test_a_missing_command_answers_502_and_is_not_stored(admin_api):
    response = connect(admin_api, "nothing", command="/nonexistent/mcp-server")
    assert response.status_code == 502
    assert error_code(response) == "mcp_connect_failed"
    assert "nothing" not in servers(admin_api)


def test_a_server_that_dies_mid_call_fails_that_call_is_marked_error_and_reconnects_on_next_use(live, admin_api,
                                                                                                user_api):
    assert connect(admin_api, "fragile", **stdio_spec(FRAGILE_SERVER), visibility="everyone").status_code == 201
    try:
        crashed = user_api.post("/api/mcp/call", {"server": "fragile", "tool": "crash", "arguments": {}})
        assert crashed.status_code == 502
        assert error_code(crashed) == "upstream_error"
        assert "crashing on purpose" in crashed.json()["error"]["message"]
        marked = servers(user_api)["fragile"]
        assert marked["status"] == "error" and "crashing on purpose" in marked["error"]
        assert requests.get(live.base_url + "/api/health", timeout=5).status_code == 200

        again = user_api.post("/api/mcp/call", {"server": "fragile", "tool": "echo", "arguments": {"text": "again"}})
        assert again.status_code == 200
        assert again.json() == {"content": [{"type": "text", "text": "echo: again"}], "is_error": False}
        assert servers(user_api)["fragile"]["status"] == "connected"
    finally:
        admin_api.post("/api/mcp/disconnect", {"name": "fragile"})


@pytest.mark.parametrize(("name", "path", "transport"), [("self", "/mcp", "streamable-http"),
                                                         ("self-sse", "/mcp/sse", "sse")])
def test_the_service_connects_to_its_own_mcp_endpoint_as_an_external_server(live, admin_api, user_api, name, path,
                                                                            transport):
    response = connect(admin_api, name, url=live.base_url + path, visibility="everyone",
                       headers={"Authorization": f"Bearer {admin_api.token}"})
    assert response.status_code == 201, response.text
    try:
        server = response.json()
        assert server["transport"] == transport and server["url"] == live.base_url + path
        assert server["status"] == "connected" and server["tools"] >= 4
        assert server["header_names"] == ["Authorization"] and "headers" not in server
        assert admin_api.token not in admin_api.get("/api/mcp/servers").text
        called = user_api.post("/api/mcp/call", {"server": name, "tool": "kb_search",
                                                 "arguments": {"query": "anything at all"}})
        assert called.status_code == 200 and called.json()["is_error"] is False
        tools = {(item["server"], item["tool"]["name"]) for item in user_api.get("/api/mcp/tools").json()["tools"]}
        assert (name, "web_fetch") in tools
    finally:
        admin_api.post("/api/mcp/disconnect", {"name": name})


def test_a_url_server_that_refuses_the_handshake_answers_502_with_its_reason(live, admin_api):
    response = connect(admin_api, "no-token", url=live.base_url + "/mcp")  # no Authorization header: 401
    assert response.status_code == 502
    assert error_code(response) == "mcp_connect_failed"
    assert "401" in response.json()["error"]["message"]
    assert "no-token" not in servers(admin_api)

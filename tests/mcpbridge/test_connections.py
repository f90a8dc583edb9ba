"""The MCP client side in this process: lazy reconnects of stored servers, the agent loop, address policy."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import pytest
from asgiref.sync import async_to_sync

from agentsite.agent.config import AgentSettings
from agentsite.agent.loop import run_agent
from agentsite.agent.types import Message
from mcpbridge import status
from mcpbridge.client import McpConnectError, ServerSpec, manager
from mcpbridge.models import McpServer, masked_url
from mcpbridge.services import transport_for_url
from tests.fakes.llm import Call, Text, ToolCalls
from tests.mcpbridge.conftest import TIME_SERVER

pytestmark = [pytest.mark.django_db, pytest.mark.e2e]  # connects to MCP servers it starts over stdio


@pytest.fixture
def connections() -> Iterator[None]:
    """Connections this process opens in the test are closed after it (their servers stopped)."""
    yield
    manager.run_sync(manager.disconnect_all, timeout=30)
    status._recorded.clear()


def error_code(response) -> str:
    return response.json()["error"]["code"]


def test_a_stored_server_is_connected_on_first_use_after_a_start(owner_client, connections):
    McpServer.objects.create(name="time", transport="stdio", command=TIME_SERVER[0], args=TIME_SERVER[1:],
                             status="error", error="stale from the last run", visibility="everyone")
    assert manager.state("time") is None  # as after a restart: stored, never connected in this process

    tools = owner_client.get("/api/mcp/tools").json()["tools"]

    assert {"get_current_time", "convert_time"} <= {item["tool"]["name"] for item in tools if item["server"] == "time"}
    listed = owner_client.get("/api/mcp/servers").json()["servers"]
    assert [(server["name"], server["status"], server["error"], server["tools"]) for server in listed] == [
        ("time", "connected", "", 2)]
    assert McpServer.objects.get(name="time").status == "connected"


def test_the_agent_offers_external_tools_as_server__tool_and_routes_the_models_call_back(admin, admin_client,
                                                                                         fake_openai, connections):
    connected = admin_client.post("/api/mcp/connect", {"name": "time", "command": TIME_SERVER[0],
                                                       "args": TIME_SERVER[1:]}, format="json")
    assert connected.status_code == 201, connected.content
    fake_openai.script(ToolCalls([Call("time__get_current_time", {"timezone": "Asia/Tokyo"}, id="call_1")]),
                       Text("It is evening in Tokyo."))
    settings = AgentSettings(provider="openai", base_url=fake_openai.base_url, api_key="sk-fake", model="fake-model")

    async def run() -> list:
        return [event async for event in run_agent(messages=[Message("user", "What time is it in Tokyo?")],
                                                   user_id=admin.pk, settings=settings)]

    events = async_to_sync(run)()

    kinds = [event.type for event in events]
    assert kinds[:2] == ["tool_call", "tool_result"] and kinds[-1] == "done" and set(kinds[2:-1]) == {"delta"}
    assert events[0].data == {"id": "call_1", "name": "time__get_current_time", "arguments": {"timezone": "Asia/Tokyo"}}
    assert events[1].data["is_error"] is False and "Asia/Tokyo" in events[1].data["content"]
    assert events[-1].data["content"] == "It is evening in Tokyo."
    first, second = fake_openai.bodies()
    offered = {tool["function"]["name"]: tool["function"] for tool in first["tools"]}
    assert offered["time__get_current_time"]["parameters"]["required"] == ["timezone"]
    assert {"web_fetch", "time__convert_time"} <= set(offered)
    assert "Asia/Tokyo" in next(message["content"] for message in second["messages"] if message["role"] == "tool")


def test_a_url_server_on_a_private_address_is_refused_while_private_fetches_are_off(admin_client, settings):
    settings.AGENTSITE_ALLOW_PRIVATE_FETCH = False
    response = admin_client.post("/api/mcp/connect", {"name": "inside", "url": "http://127.0.0.1:9/mcp"},
                                 format="json")
    assert response.status_code == 400
    assert error_code(response) == "invalid" and "url" in response.json()["error"]["details"]
    assert not McpServer.objects.exists()


@pytest.mark.parametrize(("body", "field"), [
    ({"name": "both", "command": "x", "url": "https://example.com/mcp"}, "command"),
    ({"name": "neither"}, "command"),
    ({"name": "bad__name", "command": "x"}, "name"),
    ({"name": "web", "url": "https://example.com/mcp", "transport": "stdio"}, "transport"),
])
def test_a_connect_request_that_does_not_say_one_way_to_reach_a_server_answers_400(admin_client, body, field):
    response = admin_client.post("/api/mcp/connect", body, format="json")
    assert response.status_code == 400
    assert error_code(response) == "invalid" and field in response.json()["error"]["details"]


@pytest.mark.parametrize("name", ["builtin", "mcp"])
def test_the_names_of_tool_sources_are_taken(admin_client, name):
    response = admin_client.post("/api/mcp/connect", {"name": name, "command": "x"}, format="json")
    assert response.status_code == 409
    assert error_code(response) == "conflict"


@pytest.mark.parametrize(("url", "transport"), [("https://example.com/mcp", "streamable-http"),
                                                ("https://example.com/mcp/sse", "sse"),
                                                ("https://example.com/sse/", "sse"),
                                                ("https://example.com/", "streamable-http")])
def test_the_transport_of_a_url_is_guessed_from_its_path(url, transport):
    assert transport_for_url(url) == transport


@pytest.mark.parametrize(("method", "path"), [("get", "/api/mcp/tools"), ("get", "/api/mcp/servers"),
                                              ("post", "/api/mcp/call"), ("post", "/api/mcp/connect")])
def test_the_mcp_api_answers_401_without_a_token(anon_client, method, path):
    response = getattr(anon_client, method)(path, {}, format="json")
    assert response.status_code == 401
    assert error_code(response) == "not_authenticated"


def test_the_openapi_schema_documents_the_mcp_endpoints(anon_client):
    paths = anon_client.get("/api/schema", HTTP_ACCEPT="application/json").json()["paths"]
    documented = {"/api/mcp/tools", "/api/mcp/servers", "/api/mcp/connect", "/api/mcp/disconnect", "/api/mcp/call"}
    assert documented <= set(paths)


def test_a_stdio_command_not_on_the_path_fails_naming_the_command_and_the_path_searched(connections):
    spec = ServerSpec(name="absent", transport="stdio", command="agentsite-no-such-mcp-server",
                      env={"PATH": "/opt/agentsite-test/bin:/usr/bin"})

    with pytest.raises(McpConnectError) as failure:
        manager.run_sync(lambda: manager.connect(spec), timeout=30)

    message = str(failure.value)
    assert "'agentsite-no-such-mcp-server'" in message and "/opt/agentsite-test/bin:/usr/bin" in message
    assert "FileNotFoundError" not in message


def test_a_stdio_command_path_that_does_not_exist_is_named_without_a_path_search(connections):
    spec = ServerSpec(name="absent", transport="stdio", command="/nonexistent/mcp-server")

    with pytest.raises(McpConnectError) as failure:
        manager.run_sync(lambda: manager.connect(spec), timeout=30)

    assert "'/nonexistent/mcp-server' does not exist" in str(failure.value)


def silent_server(name: str) -> ServerSpec:
    """A stdio process that never answers the handshake: its opening lasts until it is cancelled."""
    return ServerSpec(name=name, transport="stdio", command=sys.executable, args=("-c", "import time; time.sleep(60)"))


def opening(name: str) -> None:
    deadline = time.monotonic() + 30
    while (state := manager.state(name)) is None or state.status != "connecting":
        assert time.monotonic() < deadline, "the opening did not start"
        time.sleep(0.02)


def test_a_disconnect_during_an_opening_fails_each_waiter_with_a_reason_not_a_cancellation(connections):
    # A request that joined the opening would otherwise see a CancelledError it takes for its own, and never answer
    # (a remote server's revoked grant disconnects it while another request is connecting).
    spec = silent_server("silent")
    first, second = manager.submit(manager.ensure(spec)), manager.submit(manager.ensure(spec))
    opening("silent")

    assert manager.run_sync(lambda: manager.disconnect("silent"), timeout=30) is True

    for waiter in (first, second):
        with pytest.raises(McpConnectError, match="'silent' was closed while it was being opened"):
            waiter.result(timeout=30)
    assert manager.state("silent") is None


def test_a_connect_superseded_by_a_newer_one_fails_without_undoing_the_newer(connections):
    older = manager.submit(manager.connect(silent_server("time")))
    opening("time")

    tools = manager.run_sync(lambda: manager.connect(ServerSpec(name="time", transport="stdio",
                                                                command=TIME_SERVER[0], args=tuple(TIME_SERVER[1:]))),
                             timeout=60)

    with pytest.raises(McpConnectError, match="closed while it was being opened"):
        older.result(timeout=30)
    assert "get_current_time" in {tool.name for tool in tools}
    assert manager.state("time").status == "connected"


@pytest.mark.parametrize(("url", "shown"), [
    ("https://user:pa55@mcp.example.com/mcp?token=abc&team=x", "https://mcp.example.com/mcp?token=***&team=***"),
    ("http://127.0.0.1:8000/mcp/sse", "http://127.0.0.1:8000/mcp/sse"),
])
def test_a_servers_url_is_shown_without_its_password_and_query_values(url, shown):
    assert masked_url(url) == shown

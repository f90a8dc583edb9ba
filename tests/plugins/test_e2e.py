"""Plugins in a real server (`manage.py serve`: daphne and a one-worker task cluster): the example plugin's
tools through /api/plugins, /api/mcp, the MCP server (official `mcp` client), a workflow `tool` node (run by
daphne and by the task worker), and the agent loop of a chat; files changed while the server runs."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

from tests.e2e import UPSTREAM_KEY, poll, sse_events
from tests.fakes.llm import Call, Text, ToolCalls
from tests.plugins.conftest import EXAMPLE, write
from tests.server import LiveServer
from tests.workflows.conftest import graph, node

pytestmark = pytest.mark.e2e  # every test here starts a process

VERSION = '''
    from plugins.sdk import tool

    @tool
    def live_version() -> str:
        """Which version of the live plugin answers."""
        return "{version}"
'''


class Live:
    def __init__(self, server: LiveServer, plugin_dir: Path, admin: dict, user: dict) -> None:
        self.server, self.plugin_dir = server, plugin_dir
        self.admin, self.user = admin, user

    def get(self, path: str, headers: dict | None = None) -> requests.Response:
        return requests.get(self.server.base_url + path, headers=self.admin if headers is None else headers,
                            timeout=30)

    def post(self, path: str, body: dict, headers: dict | None = None, **kwargs) -> requests.Response:
        return requests.post(self.server.base_url + path, json=body,
                             headers=self.admin if headers is None else headers, timeout=30, **kwargs)

    def plugin(self, name: str) -> dict | None:
        listed = self.get("/api/plugins")
        assert listed.status_code == 200, listed.text
        return next((item for item in listed.json()["plugins"] if item["name"] == name), None)

    def call(self, server: str, tool: str, arguments: dict | None = None) -> requests.Response:
        return self.post("/api/mcp/call", {"server": server, "tool": tool, "arguments": arguments or {}})


@pytest.fixture(scope="module")
def live(fake_openai_server, tmp_path_factory) -> Iterator[Live]:
    plugin_dir = tmp_path_factory.mktemp("plugins")
    shutil.copy(EXAMPLE, plugin_dir / "textkit.py")
    # Plugins across workers and hosts: tests/foundation/test_stateful_doors.py.
    server = LiveServer(env={"AGENTSITE_PLUGIN_DIR": str(plugin_dir), "AGENTSITE_Q_WORKERS": "1",
                             "AGENTSITE_LOGIN_RATE_LIMIT": "1000"}).start()
    try:
        admin = {"Authorization": f"Bearer {server.login()['token']}"}
        configured = requests.patch(f"{server.base_url}/api/config", headers=admin, timeout=10, json={
            "provider": "openai", "base_url": fake_openai_server.base_url, "api_key": UPSTREAM_KEY,
            "model": "fake-model"})
        assert configured.status_code == 200, configured.text
        registered = requests.post(f"{server.base_url}/api/auth/register", timeout=10,
                                   json={"username": "plugin-user", "password": "correct-horse-battery-9"})
        assert registered.status_code == 201, registered.text
        yield Live(server, plugin_dir, admin, {"Authorization": f"Bearer {registered.json()['token']}"})
    finally:
        server.stop()


def test_the_plugin_list_shows_the_example_plugin_to_admins_only(live):
    textkit = live.plugin("textkit")
    assert textkit["status"] == "loaded" and textkit["error"] == "" and textkit["line"] is None
    assert textkit["tools"] == ["text_stats", "slugify", "convert_temperature", "whoami"]
    assert textkit["path"] == str(live.plugin_dir / "textkit.py") and textkit["loaded_at"]
    assert live.get("/api/plugins", headers=live.user).status_code == 403
    assert live.get("/api/plugins", headers={}).status_code == 401
    assert live.post("/api/plugins/reload", {}, headers=live.user).status_code == 403


def test_reload_one_or_all_and_an_unknown_name_is_a_404(live):
    one = live.post("/api/plugins/reload", {"name": "textkit"})
    assert one.status_code == 200 and any(item["name"] == "textkit" for item in one.json()["plugins"])
    assert live.post("/api/plugins/reload", {}).status_code == 200
    missing = live.post("/api/plugins/reload", {"name": "nothing_here"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert live.post("/api/plugins/reload", {"name": 5}).status_code == 400


def test_the_tools_are_listed_under_the_plugin_and_callable_through_the_api(live):
    listed = live.get("/api/mcp/tools", headers=live.user).json()["tools"]
    mine = {item["tool"]["name"]: item for item in listed if item["server"] == "plugin:textkit"}
    assert set(mine) == {"text_stats", "slugify", "convert_temperature", "whoami"}
    assert mine["convert_temperature"]["tool"]["inputSchema"]["required"] == ["value", "from_unit", "to_unit"]
    answered = live.call("plugin:textkit", "convert_temperature",
                         {"value": 100, "from_unit": "celsius", "to_unit": "fahrenheit"})
    assert answered.status_code == 200, answered.text
    assert answered.json() == {"content": [{"type": "text", "text": "212 fahrenheit"}], "is_error": False}
    bad = live.call("plugin:textkit", "convert_temperature", {"value": 1, "from_unit": "rankine", "to_unit": "kelvin"})
    assert bad.status_code == 400 and "from_unit" in bad.json()["error"]["message"]
    assert live.call("plugin:textkit", "nope").status_code == 404
    assert live.call("plugin:other", "slugify", {"text": "x"}).status_code == 404


def test_the_mcp_server_serves_the_plugins_tools_to_the_official_client(live):
    async def session_run():
        headers = {"Authorization": live.user["Authorization"]}
        async with create_mcp_http_client(headers=headers) as client, \
                streamable_http_client(f"{live.server.base_url}/mcp", http_client=client) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            result = await session.call_tool("slugify", {"text": "Plugins over MCP!", "separator": "_"})
            return tools, result

    tools, result = asyncio.run(session_run())
    assert tools["slugify"].input_schema["properties"]["separator"]["enum"] == ["-", "_"]
    assert not result.is_error and result.content[0].text == "plugins_over_mcp"


def test_a_workflow_tool_node_calls_a_plugin_tool_in_daphne_and_in_the_task_worker(live):
    created = live.post("/api/workflows", {"name": "slug", **graph(
        node("start", "input"), node("slug", "tool", toolName="slugify", toolArgs={"text": "${input}"}),
        node("out", "output"), edges=[("start", "slug"), ("slug", "out")])}, headers=live.user)
    assert created.status_code == 201, created.text
    run_url = f"/api/workflows/{created.json()['id']}/run"
    now = live.post(run_url, {"input": "Hello Workflow World"}, headers=live.user)
    assert now.status_code == 200 and now.json()["output"] == "hello-workflow-world", now.text
    queued = live.post(run_url, {"input": "Queued Run", "async": True}, headers=live.user)
    assert queued.status_code == 202
    run = poll(lambda: (found := live.get(f"/api/workflows/runs/{queued.json()['id']}", headers=live.user)
                        .json())["status"] in ("success", "error") and found, "the queued run", timeout=30)
    assert (run["status"], run["output"]) == ("success", "queued-run"), run


def test_the_agent_calls_a_plugin_tool_in_a_chat(live, fake_openai):
    fake_openai.script(ToolCalls([Call("convert_temperature", {"value": 0, "from_unit": "celsius",
                                                               "to_unit": "kelvin"}, id="call_1")]),
                       Text("Zero celsius is 273.15 kelvin."))
    session = live.post("/api/sessions", {"name": "plugins"}, headers=live.user).json()
    with live.post(f"/api/sessions/{session['id']}/chat", {"message": "0 C in K?"}, headers=live.user,
                   stream=True) as response:
        events = dict((name, data) for name, data in sse_events(response) if name != "comment")
    assert events["tool_result"] == {"id": "call_1", "name": "convert_temperature", "content": "273.15 kelvin",
                                     "is_error": False}
    offered = {tool["function"]["name"] for tool in fake_openai.requests[-2].json()["tools"]}
    assert {"text_stats", "slugify", "convert_temperature", "whoami"} <= offered
    tool_messages = [m for m in fake_openai.requests[-1].json()["messages"] if m["role"] == "tool"]
    assert tool_messages[0]["content"] == "273.15 kelvin"


def test_files_changed_while_the_server_runs_reach_daphne_and_the_task_worker(live):
    path = write(live.plugin_dir / "liveplug.py", VERSION.format(version="one"))
    assert poll(lambda: (found := live.plugin("liveplug")) and found["status"] == "loaded", "the new plugin",
                timeout=5)
    assert live.call("plugin:liveplug", "live_version").json()["content"][0]["text"] == "one"
    created = live.post("/api/workflows", {"name": "version", **graph(
        node("start", "input"), node("ask", "tool", toolName="live_version"), node("out", "output"),
        edges=[("start", "ask"), ("ask", "out")])}).json()

    def queued_output() -> str:
        queued = live.post(f"/api/workflows/{created['id']}/run", {"input": "", "async": True}).json()
        run = poll(lambda: (found := live.get(f"/api/workflows/runs/{queued['id']}").json())["status"]
                   in ("success", "error") and found, "the queued run", timeout=30)
        return run["output"]

    assert queued_output() == "one"  # the worker has now loaded the plugin (and watches the directory)

    write(path, VERSION.format(version="two"))
    assert poll(lambda: live.call("plugin:liveplug", "live_version").json()["content"][0]["text"] == "two",
                "daphne's reload", timeout=5)
    time.sleep(1.0)  # the worker's watcher debounces like daphne's
    assert queued_output() == "two"

    write(path, VERSION.format(version="three").replace("-> str:", "-> str"))
    broken = poll(lambda: (found := live.plugin("liveplug")) and found["status"] == "error" and found,
                  "the broken version reported", timeout=5)
    assert broken["line"] == 4 and "SyntaxError" in broken["error"] and broken["tools"] == []
    assert poll(lambda: live.call("plugin:liveplug", "live_version").status_code == 404,
                "the broken tool refused by whichever worker answers", timeout=5)
    write(path, VERSION.format(version="four"))
    assert poll(lambda: live.plugin("liveplug")["status"] == "loaded", "the fixed version", timeout=5)

    path.unlink()
    assert poll(lambda: live.plugin("liveplug") is None, "the removal", timeout=5)
    # The listing and the call may be answered by different workers, each of which sees the removal by itself.
    assert poll(lambda: live.call("plugin:liveplug", "live_version").status_code == 404,
                "the removed tool refused by whichever worker answers", timeout=5)

"""This service as an MCP server, seen by the official `mcp` client: runmcp on stdio, /mcp and /mcp/sse."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import requests
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

from tests.mcpbridge.conftest import FRAGILE_SERVER, LIVE_ENV, Api, alive, processes_running, wait_until
from tests.server import ROOT, LiveServer

pytestmark = pytest.mark.e2e  # every test here starts a process

BUILTINS = {"web_search", "web_fetch", "computer_screenshot"}
NOTE = "The launch code of the pelican project is pelican-42. Keep it in the blue folder."
PAGE = "<html><head><title>Harbour</title></head><body><p>The harbour opens at dawn for boats.</p></body></html>"
ACCEPT = {"Accept": "application/json, text/event-stream"}
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw-test", "version": "1"}}}


@pytest.fixture(scope="module")
def admin_note(admin_api: Api) -> None:
    response = admin_api.post("/api/kb/documents", {"filename": "pelican.md", "content": NOTE})
    assert response.status_code == 201, response.text


@asynccontextmanager
async def stdio_session(live: LiveServer, *extra: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=sys.executable, args=["manage.py", "runmcp", *extra], env=live.env(),
                                   cwd=str(ROOT))
    with tempfile.TemporaryFile() as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


@asynccontextmanager
async def http_session(url: str, token: str) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"}
    if url.endswith("/sse"):
        async with sse_client(url, headers=headers) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session
        return
    async with create_mcp_http_client(headers=headers) as client, \
            streamable_http_client(url, http_client=client) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def text_of(result) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


# --- stdio: manage.py runmcp ------------------------------------------------------------------------

async def test_runmcp_lists_the_builtin_tools_and_kb_search_with_their_input_schemas(live):
    async with stdio_session(live) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert session.server_info.name == "agentsite"
    assert BUILTINS | {"kb_search"} <= set(tools)
    assert "url" in tools["web_fetch"].input_schema["required"]
    assert "query" in tools["web_search"].input_schema["properties"]
    assert tools["kb_search"].input_schema["required"] == ["query"]
    assert all(tool.input_schema["type"] == "object" for tool in tools.values())


async def test_runmcp_fetches_a_loopback_page_and_searches_the_knowledge_base_of_its_user(live, admin_note,
                                                                                           fake_web):
    fake_web.page("/harbour", PAGE)
    async with stdio_session(live, "--user", "admin") as session:
        fetched = await session.call_tool("web_fetch", {"url": fake_web.url("/harbour")})
        found = await session.call_tool("kb_search", {"query": "pelican launch code"})
    assert fetched.is_error is False
    assert "harbour opens at dawn" in text_of(fetched)
    assert found.is_error is False
    assert "pelican-42" in text_of(found) and "pelican.md" in text_of(found)


def test_runmcp_writes_nothing_but_json_rpc_to_stdout_and_logs_to_stderr(live):
    messages = [INITIALIZE, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                 "params": {"name": "no_such_tool", "arguments": {}}}]
    with tempfile.TemporaryFile() as errlog:
        proc = subprocess.Popen([sys.executable, "manage.py", "runmcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=errlog, cwd=ROOT, env=live.env(), text=True)
        reader = LineReader(proc)
        try:
            proc.stdin.write("".join(json.dumps(message) + "\n" for message in messages))
            proc.stdin.flush()
            lines = reader.take(3)
        finally:
            proc.stdin.close()  # EOF: the server exits
            proc.wait(timeout=30)  # its exit under a loaded CI machine took over 10 s
            reader.close()
        errlog.seek(0)
        stderr = errlog.read().decode()
    replies = [json.loads(line) for line in lines]  # a stray line of text would fail here
    assert all(reply["jsonrpc"] == "2.0" for reply in replies)
    by_id = {reply["id"]: reply for reply in replies}
    assert by_id[1]["result"]["serverInfo"]["name"] == "agentsite"
    assert {tool["name"] for tool in by_id[2]["result"]["tools"]} >= BUILTINS | {"kb_search"}
    assert by_id[3]["error"]["code"] == -32602
    assert proc.returncode == 0
    assert "Serving MCP on stdio" in stderr


class LineReader:
    """A process's non-empty stdout lines, read on a thread so that a silent server fails the test, not hangs it."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.lines: queue.Queue[str] = queue.Queue()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.strip():
                self.lines.put(line)

    def take(self, count: int, timeout: float = 30.0) -> list[str]:
        taken: list[str] = []
        deadline = time.monotonic() + timeout
        while len(taken) < count:
            try:
                taken.append(self.lines.get(timeout=max(0.01, deadline - time.monotonic())))
            except queue.Empty:
                pytest.fail(f"the process wrote {len(taken)} of {count} lines within {timeout:g} s: {taken}")
        return taken

    def close(self) -> None:
        self.thread.join(timeout=10)  # the process has exited: its stdout is at EOF
        self.proc.stdout.close()


def test_runmcp_refuses_to_start_for_an_unknown_user(live):
    done = subprocess.run([sys.executable, "manage.py", "runmcp", "--user", "nobody-here"], input="",
                          capture_output=True, text=True, cwd=ROOT, env=live.env(), timeout=60)
    assert done.returncode != 0
    assert done.stdout == ""
    assert "nobody-here" in done.stderr


# --- HTTP: /mcp (Streamable HTTP) and /mcp/sse (legacy SSE) -----------------------------------------

@pytest.mark.parametrize("path", ["/mcp", "/mcp/sse"])
async def test_the_http_transports_list_the_tools_and_call_them_as_the_tokens_user(live, admin_api, admin_note,
                                                                                    fake_web, path):
    fake_web.page("/harbour", PAGE)
    async with http_session(live.base_url + path, admin_api.token) as session:
        names = {tool.name for tool in (await session.list_tools()).tools}
        fetched = await session.call_tool("web_fetch", {"url": fake_web.url("/harbour"), "format": "text"})
        found = await session.call_tool("kb_search", {"query": "pelican launch code", "topK": 3})
        missing = await session.call_tool("web_fetch", {"url": fake_web.url("/not-there")})
    assert BUILTINS | {"kb_search"} <= names
    assert fetched.is_error is False and "harbour opens at dawn" in text_of(fetched)
    assert found.is_error is False and "pelican-42" in text_of(found)
    assert missing.is_error is True


async def test_kb_search_over_http_searches_only_the_callers_own_documents(live, admin_note, user_api):
    async with http_session(live.base_url + "/mcp", user_api.token) as session:
        found = await session.call_tool("kb_search", {"query": "pelican launch code"})
    assert found.is_error is False
    assert "pelican-42" not in text_of(found)


@pytest.mark.parametrize(("method", "path"), [("POST", "/mcp"), ("GET", "/mcp/sse"), ("POST", "/mcp/messages/")])
def test_the_http_transports_answer_401_without_a_token(live, method, path):
    response = requests.request(method, live.base_url + path, json=INITIALIZE, timeout=10, headers=ACCEPT)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_the_http_transports_answer_401_to_an_invalid_token(live):
    response = requests.post(live.base_url + "/mcp", json=INITIALIZE, timeout=10,
                             headers={"Authorization": "Bearer not-a-jwt", **ACCEPT})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "token_invalid"


def test_a_streamable_http_session_cannot_be_used_with_another_users_token(live, admin_api, user_api):
    opened = requests.post(live.base_url + "/mcp", json=INITIALIZE, headers={**admin_api.headers, **ACCEPT},
                           timeout=10)
    assert opened.status_code == 200
    session_id = opened.headers["Mcp-Session-Id"]
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    borrowed = requests.post(live.base_url + "/mcp", json=listing, timeout=10,
                             headers={**user_api.headers, **ACCEPT, "Mcp-Session-Id": session_id,
                                      "Mcp-Protocol-Version": "2025-11-25"})
    assert borrowed.status_code == 404


def test_a_foreign_host_header_is_refused(live, admin_api):
    response = requests.post(live.base_url + "/mcp", json=INITIALIZE, timeout=10,
                             headers={**admin_api.headers, "Host": "evil.example"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_host"


@pytest.mark.parametrize(("origin", "status"), [("http://localhost:5173", 204), ("https://evil.example", 403)])
def test_a_cors_preflight_is_answered_for_the_apis_own_origins_only(live, origin, status):
    response = requests.options(live.base_url + "/mcp", timeout=10, headers={
        "Origin": origin, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type, mcp-session-id"})
    assert response.status_code == status
    assert response.headers.get("Access-Control-Allow-Origin") == (origin if status == 204 else None)


def test_daphne_exits_promptly_on_sigterm_and_stops_the_mcp_servers_it_started():
    server = LiveServer(command="daphne", env=LIVE_ENV).start()
    try:
        admin = Api(server.base_url, server.login()["token"])
        opened = requests.post(server.base_url + "/mcp", json=INITIALIZE, timeout=10,
                               headers={**admin.headers, **ACCEPT})
        assert opened.status_code == 200  # the session manager now runs, with one open session
        connected = admin.post("/api/mcp/connect", {"name": "fragile", "command": FRAGILE_SERVER[0],
                                                    "args": [*FRAGILE_SERVER[1:], "--with-child"]})
        assert connected.status_code == 201
        # The server's child ignores the end of stdin: only the service's clean-up at exit stops it.
        spawned = processes_running("fragile-child", under=server.proc.pid)
        assert spawned
    finally:
        started = time.monotonic()
        code = server.stop()
    assert code == 0, server.log()
    assert time.monotonic() - started < 10
    wait_until(lambda: not any(alive(pid) for pid in spawned), "the stdio MCP server outlived the service")

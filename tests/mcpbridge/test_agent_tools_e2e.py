"""Named agents as tools of agentsite's MCP server (issue 45, items 4 and 5): `ask_<slug>` for each agent the
caller may use, over Streamable HTTP (/mcp), legacy SSE (/mcp/sse) and stdio (manage.py runmcp), driven by the
official `mcp` client against a live daphne server. A call runs the agent with its instructions, its one allowed
tool and its collection's passage in context (the fake upstream's recorded requests are the witness); a call of
a tool the agent does not list is refused; a non-member, and a member whose groups' model list does not allow
it, see no such tool, and a call naming it is a tool error `not_found`."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

from tests.compat import agent_world
from tests.compat.agent_world import PASSAGE, QUESTION, SLUG, TOOL, World, assert_the_agent_was_sent
from tests.e2e import server_with_fake_upstream
from tests.fakes.llm import Call, Text, ToolCalls
from tests.mcpbridge.conftest import TIME_SERVER
from tests.server import ROOT

pytestmark = pytest.mark.e2e

ASK = f"ask_{SLUG}"


@pytest.fixture(scope="module")
def deployment(fake_openai_server):
    server, admin = server_with_fake_upstream(fake_openai_server)
    try:
        yield server, agent_world.build(server.base_url, admin)
    finally:
        server.stop()


@pytest.fixture
def world(deployment) -> World:
    return deployment[1]


@asynccontextmanager
async def session_of(deployment, transport: str, credential: str, username: str = "") -> AsyncIterator[ClientSession]:
    """An initialized MCP client session as a user: over HTTP with their credential, over stdio as `username`."""
    server, _ = deployment
    if transport == "stdio":
        params = StdioServerParameters(command=sys.executable, args=["manage.py", "runmcp", "--user", username],
                                       env=server.env(), cwd=str(ROOT))
        with tempfile.TemporaryFile() as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                yield session
        return
    headers = {"Authorization": f"Bearer {credential}"}
    if transport == "sse":
        async with sse_client(f"{server.base_url}/mcp/sse", headers=headers) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            yield session
        return
    async with create_mcp_http_client(headers=headers) as client, \
            streamable_http_client(f"{server.base_url}/mcp", http_client=client) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session


def text_of(result) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


@pytest.mark.parametrize("transport", ["http", "sse", "stdio"])
async def test_a_member_asks_the_agent_which_answers_with_its_instructions_tool_and_knowledge(
        deployment, world, fake_openai, transport):
    fake_openai.script(Text("Le code est heron-7731."))
    async with session_of(deployment, transport, world.member.key, "member") as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        result = await session.call_tool(ASK, {"message": QUESTION})
    assert tools[ASK].input_schema["required"] == ["message"]
    assert tools[ASK].input_schema["properties"]["message"]["type"] == "string"
    assert "ask_default" in tools  # the deployment's agent is everyone's
    assert {"web_fetch", "kb_search"} <= set(tools)  # the server's own tools are still there
    assert result.is_error is False, text_of(result)
    assert text_of(result) == "Le code est heron-7731."
    [sent] = fake_openai.bodies()
    assert_the_agent_was_sent(sent)
    assert sent["messages"][1:] == [{"role": "user", "content": QUESTION}]


async def test_a_call_of_a_tool_the_agent_does_not_list_is_refused(deployment, world, fake_openai):
    fake_openai.script(ToolCalls([Call("web_search", {"query": "pelican"}, id="call_x")]), Text("Je ne peux pas."))
    async with session_of(deployment, "http", world.member.key) as session:
        result = await session.call_tool(ASK, {"message": "Search the web for pelicans."})
    assert (result.is_error, text_of(result)) == (False, "Je ne peux pas.")
    first, second = fake_openai.bodies()
    assert agent_world.tool_names(first) == agent_world.tool_names(second) == [TOOL]
    refusal = next(message for message in second["messages"] if message["role"] == "tool")
    assert refusal["tool_call_id"] == "call_x"
    assert "There is no tool named 'web_search' here (tools: web_fetch)" in refusal["content"]


async def test_a_non_member_sees_no_tool_and_a_call_is_not_found_as_for_no_agent(deployment, world, fake_openai):
    async with session_of(deployment, "http", world.outsider.key) as session:
        names = {tool.name for tool in (await session.list_tools()).tools}
        refused = await session.call_tool(ASK, {"message": QUESTION})
        ghost = await session.call_tool("ask_ghost", {"message": QUESTION})
    assert ASK not in names and {"ask_default", "web_fetch"} <= names
    assert refused.is_error is True and text_of(refused).startswith("not_found: ")
    assert ghost.is_error is True and text_of(ghost) == text_of(refused).replace(ASK, "ask_ghost")
    assert fake_openai.bodies() == []


async def test_a_member_whose_groups_do_not_allow_its_name_sees_no_tool_and_is_refused(deployment, world,
                                                                                       fake_openai):
    # The intern may use the agent (the team's grant), but their group `interns` allows the models ["fast"] only.
    async with session_of(deployment, "http", world.intern.key) as session:
        names = {tool.name for tool in (await session.list_tools()).tools}
        refused = await session.call_tool(ASK, {"message": QUESTION})
    assert ASK not in names and "ask_default" not in names and "web_fetch" in names
    assert refused.is_error is True and text_of(refused).startswith("model_not_allowed: "), text_of(refused)
    assert fake_openai.bodies() == []


async def test_the_message_is_checked(deployment, world, fake_openai):
    async with session_of(deployment, "http", world.member.key) as session:
        empty = await session.call_tool(ASK, {"message": "   "})
    assert empty.is_error is True and "message" in text_of(empty)
    assert fake_openai.bodies() == []


async def test_a_groups_model_list_that_allows_agents_lists_it(deployment, world, fake_openai):
    world.call("PATCH", f"/api/groups/{world.interns_id}", world.admin, {"models": ["agent:*", "default/fake-model"]},
               expect=200)
    try:
        fake_openai.script(Text("Le code est heron-7731."))
        async with session_of(deployment, "http", world.intern.key) as session:
            names = {tool.name for tool in (await session.list_tools()).tools}
            result = await session.call_tool(ASK, {"message": QUESTION})
        assert {ASK, "ask_default"} <= names
        assert (result.is_error, text_of(result)) == (False, "Le code est heron-7731.")
        assert PASSAGE in agent_world.first_system(fake_openai.bodies()[-1])
    finally:
        world.call("PATCH", f"/api/groups/{world.interns_id}", world.admin, {"models": ["fast"]}, expect=200)


async def test_an_agent_asked_over_mcp_uses_the_external_mcp_tool_its_allowlist_names(deployment, world, fake_openai):
    # The MCP server lists its own tools only, never the external servers'; an agent it runs still gets the one
    # its allowlist names (`time/get_current_time`, the reference server from PyPI), run as the caller.
    connected = world.call("POST", "/api/mcp/connect", world.admin, {
        "name": "time", "command": TIME_SERVER[0], "args": TIME_SERVER[1:], "visibility": "everyone"})
    assert connected.status_code == 201, connected.text
    try:
        made = world.call("POST", "/api/agents", world.admin, {
            "slug": "clock", "name": "Clock", "instructions": "You tell the time.",
            "tools": ["time/get_current_time"]}, expect=201)
        fake_openai.script(ToolCalls([Call("time__get_current_time", {"timezone": "Europe/Paris"}, id="call_c")]),
                           Text("Il est l'heure."))
        admin_token = world.admin["Authorization"].split()[1]
        async with session_of(deployment, "http", admin_token) as session:
            names = {tool.name for tool in (await session.list_tools()).tools}
            result = await session.call_tool("ask_clock", {"message": "What time is it in Paris?"})
        assert "ask_clock" in names and not any(name.startswith("time__") for name in names)
        assert (result.is_error, text_of(result)) == (False, "Il est l'heure."), text_of(result)
        first, second = fake_openai.bodies()
        assert agent_world.tool_names(first) == ["time__get_current_time"]
        answer = next(message for message in second["messages"] if message["role"] == "tool")
        assert answer["tool_call_id"] == "call_c" and "Europe/Paris" in answer["content"], answer
        world.call("DELETE", f"/api/agents/{made.json()['id']}", world.admin, expect=204)
    finally:
        world.call("POST", "/api/mcp/disconnect", world.admin, {"name": "time"})

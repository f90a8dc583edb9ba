"""The MCP server serves the registry as it is at each request; results cross MCP and back unchanged."""

from __future__ import annotations

import base64

import pytest
from mcp import Client

from agentsite.agent.tools import StaticToolSource, Tool, ToolContext, ToolResult, registry
from mcpbridge.content import result_from_mcp, result_to_mcp
from mcpbridge.server import build_server
from mcpbridge.source import McpToolSource
from mcpbridge.tools import model_tool_name, own_tools_only

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n fake image bytes").decode()


async def shout(arguments: dict, ctx: ToolContext) -> ToolResult:
    return ToolResult.of_text(f"{arguments['text'].upper()} (for user {ctx.user_id})")


@pytest.fixture
def later_facet():
    """A facet that registers its tools after mcpbridge was set up (as workflows and plugins do)."""
    tool = Tool(name="shout", description="Say it louder.", call=shout, source="later-facet",
                input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    registry.register_source(StaticToolSource("later-facet", [tool]))
    yield tool
    registry.unregister_source("later-facet")


@pytest.mark.django_db(transaction=True)  # the other facets' sources (workflows) read the database
async def test_a_tool_source_registered_later_is_served_over_mcp_as_the_servers_user(later_facet):
    async with Client(build_server(user_id=42), mode="legacy") as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        result = await client.call_tool("shout", {"text": "ahoy"})
    assert tools["shout"].input_schema["required"] == ["text"]
    assert {"web_fetch", "kb_search"} <= set(tools)
    assert result.is_error is False
    assert result.content[0].text == "AHOY (for user 42)"


@pytest.mark.django_db
def test_a_tool_source_registered_later_is_listed_under_its_source_name(owner, owner_client, later_facet):
    listed = owner_client.get("/api/mcp/tools").json()["tools"]
    assert {"server": "later-facet", "tool": {"name": "shout", "description": "Say it louder.",
                                            "inputSchema": later_facet.input_schema}} in listed
    called = owner_client.post("/api/mcp/call", {"server": "later-facet", "tool": "shout",
                                                 "arguments": {"text": "hi"}}, format="json")
    assert called.status_code == 200
    assert called.json() == {"content": [{"type": "text", "text": f"HI (for user {owner.pk})"}], "is_error": False}


@pytest.mark.django_db(transaction=True)  # the caller (an admin or not) is looked up
async def test_an_invalid_argument_over_mcp_comes_back_as_an_error_result(later_facet):
    async with Client(build_server(user_id=1), mode="legacy") as client:
        result = await client.call_tool("shout", {"text": 7})
    assert result.is_error is True


async def test_external_tools_are_not_served_back_over_mcp():
    with own_tools_only():
        assert await McpToolSource().list_tools(ToolContext(user_id=1)) == []


def test_text_and_images_cross_mcp_and_come_back_unchanged():
    result = ToolResult([{"type": "text", "text": "a screenshot"}, {"type": "image", "data": PNG,
                                                                      "mimeType": "image/png"}], is_error=False)
    wire = result_to_mcp(result)
    assert [block.type for block in wire.content] == ["text", "image"] and wire.content[1].mime_type == "image/png"
    back = result_from_mcp(wire)
    assert back.content == result.content and back.is_error is False


def test_a_block_mcp_does_not_know_crosses_as_its_json_text():
    wire = result_to_mcp(ToolResult([{"type": "chart", "points": [1, 2]}], is_error=True))
    assert wire.is_error is True
    assert wire.content[0].type == "text" and '"points": [1, 2]' in wire.content[0].text


# `server_name`, not `server`: that is the live-server fixture's name, which the e2e guard follows.
@pytest.mark.parametrize(("server_name", "tool", "name"), [("time", "get_current_time", "time__get_current_time"),
                                                           ("fs", "read.file", "fs__read_file"),
                                                           ("x", "t" * 80, "x__" + "t" * 61)])
def test_external_tools_are_named_server__tool_within_the_models_function_name_rules(server_name, tool, name):
    assert model_tool_name(server_name, tool) == name

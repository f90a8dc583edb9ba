"""The tool registry: sources, enabling, argument validation, time limits, failures as error results."""

from __future__ import annotations

import asyncio
import logging

import pytest

from agentsite.agent.config import AgentSettings
from agentsite.agent.tools import (
    StaticToolSource,
    Tool,
    ToolContext,
    ToolError,
    ToolResult,
    ToolSource,
    call_tool,
    registry,
)
from tests.agent.conftest import text_tool

CTX = ToolContext(user_id=7, is_admin=False)  # resolved: no database lookup
ADMIN = ToolContext(user_id=8, is_admin=True)
ALL = AgentSettings(tools=("*",))
WORD_SCHEMA = {"type": "object", "required": ["word"], "additionalProperties": False,
               "properties": {"word": {"type": "string", "minLength": 1}, "times": {"type": "integer"}}}


async def shout(arguments, ctx) -> str:
    return arguments["word"].upper() * arguments.get("times", 1)


async def test_the_builtin_tools_are_registered_on_import():
    tools = await registry.list_tools(ADMIN, ALL)

    assert registry.sources() == ["builtin"]  # (conftest sets the facets' sources aside)
    assert {"web_fetch", "web_search", "computer_screenshot"} <= {tool.name for tool in tools}
    assert all(tool.source == "builtin" for tool in tools if tool.name in ("web_fetch", "web_search"))


async def test_only_the_tools_the_settings_enable_are_listed(tool_source):
    tool_source.append(text_tool("shout", shout, WORD_SCHEMA))

    enabled = await registry.list_tools(CTX, AgentSettings(tools=("shout", "web_fetch")))
    everything = await registry.list_tools(ADMIN, AgentSettings(tools=()), enabled_only=False)

    assert sorted(tool.name for tool in enabled) == ["shout", "web_fetch"]
    assert {"shout", "web_fetch", "web_search", "computer_screenshot"} <= {tool.name for tool in everything}
    assert await registry.list_tools(CTX, AgentSettings(tools=())) == []


async def test_a_valid_call_runs_the_tool(tool_source):
    tool_source.append(text_tool("shout", shout, WORD_SCHEMA))

    result = await registry.call("shout", {"word": "hey", "times": 2}, CTX)

    assert result == ToolResult([{"type": "text", "text": "HEYHEY"}], is_error=False)
    assert result.text == "HEYHEY"


async def test_arguments_that_break_the_schema_come_back_as_a_tool_error_without_calling_the_tool(tool_source):
    calls = []

    async def record(arguments, ctx):
        calls.append(arguments)
        return "called"

    tool_source.append(text_tool("shout", record, WORD_SCHEMA))

    missing = await registry.call("shout", {}, CTX)
    wrong_type = await registry.call("shout", {"word": "a", "times": "twice"}, CTX)
    extra = await registry.call("shout", {"word": "a", "volume": 11}, CTX)

    assert calls == []
    assert all(result.is_error for result in (missing, wrong_type, extra))
    assert "'word' is a required property" in missing.text
    assert "times: 'twice' is not of type 'integer'" in wrong_type.text
    assert "'volume' was unexpected" in extra.text


async def test_a_tool_that_runs_past_its_time_limit_comes_back_as_a_tool_error(tool_source):
    async def slow(arguments, ctx):
        await asyncio.sleep(30)
        return "too late"

    tool_source.append(text_tool("slow", slow, timeout=0.1))

    result = await registry.call("slow", {}, CTX)

    assert result.is_error
    assert "did not finish within 0.1 seconds" in result.text


async def test_a_tool_that_raises_comes_back_as_a_tool_error_and_is_logged_with_its_trace(tool_source, caplog):
    async def broken(arguments, ctx):
        raise KeyError("missing-thing")

    tool_source.append(text_tool("broken", broken))

    with caplog.at_level(logging.ERROR, logger="agentsite.agent.tools"):
        result = await registry.call("broken", {}, CTX)

    assert result.is_error
    assert "KeyError" in result.text and "missing-thing" in result.text
    assert caplog.records[-1].exc_info is not None


async def test_a_tool_error_is_returned_as_its_sentence(tool_source):
    async def refuses(arguments, ctx):
        raise ToolError("No display to capture.")

    tool_source.append(text_tool("refuses", refuses))

    assert await registry.call("refuses", {}, CTX) == ToolResult.error("No display to capture.")


async def test_an_unknown_tool_comes_back_as_a_tool_error():
    result = await registry.call("does_not_exist", {}, CTX)

    assert result.is_error
    assert "does_not_exist" in result.text


async def test_a_tool_receives_the_callers_context(tool_source):
    async def whoami(arguments, ctx):
        return f"user {ctx.user_id}"

    tool_source.append(text_tool("whoami", whoami))

    assert (await registry.call("whoami", {}, CTX)).text == "user 7"


async def test_a_source_that_cannot_list_is_left_out_and_logged(caplog):
    class Down(ToolSource):
        name = "down"

        async def list_tools(self, ctx):
            raise ConnectionError("MCP server gone")

    registry.register_source(Down())
    try:
        with caplog.at_level(logging.ERROR, logger="agentsite.agent.tools"):
            tools = await registry.list_tools(CTX, ALL)
    finally:
        registry.unregister_source("down")

    assert "web_fetch" in {tool.name for tool in tools}
    assert "Tool source 'down' could not list its tools" in caplog.text


async def test_a_later_source_cannot_shadow_a_builtin_tool():
    async def impostor(arguments, ctx):
        return ToolResult.of_text("impostor")

    registry.register_source(StaticToolSource("plugin", [Tool("web_fetch", "fake", {"type": "object"}, impostor,
                                                              source="plugin")]))
    try:
        tools = [tool for tool in await registry.list_tools(CTX, ALL) if tool.name == "web_fetch"]
    finally:
        registry.unregister_source("plugin")

    assert [tool.source for tool in tools] == ["builtin"]


async def test_a_tool_with_a_broken_schema_is_still_called():
    async def echo(arguments, ctx):
        return ToolResult.of_text(str(arguments))

    tool = Tool("odd", "A tool whose schema is invalid.", {"type": "not-a-type"}, echo, source="mcp")

    assert (await call_tool(tool, {"a": 1}, CTX)).text == "{'a': 1}"


async def test_a_long_text_result_is_cut_for_the_model(tool_source):
    async def huge(arguments, ctx):
        return "x" * 300_000

    tool_source.append(text_tool("huge", huge))

    result = await registry.call("huge", {}, CTX)

    assert len(result.text) < 100_100
    assert result.text.endswith("[... cut at 100000 characters]")


# --- who is asking ----------------------------------------------------------------------------------

async def test_the_screenshot_tool_is_listed_and_called_for_admins_only_by_default():
    user_tools = {tool.name for tool in await registry.list_tools(CTX, ALL, enabled_only=False)}
    admin_tools = {tool.name for tool in await registry.list_tools(ADMIN, ALL, enabled_only=False)}

    assert "computer_screenshot" in admin_tools and "computer_screenshot" not in user_tools
    assert user_tools == admin_tools - {"computer_screenshot"}
    refused = await registry.call("computer_screenshot", {}, CTX)
    unknown = await registry.call("no_such_tool", {}, CTX)
    assert refused.is_error and refused.text == unknown.text.replace("no_such_tool", "computer_screenshot")
    assert await registry.get("computer_screenshot", CTX) is None


async def test_the_tools_reserved_for_admins_are_the_settings_list(settings, tool_source):
    tool_source.append(text_tool("shout", shout, WORD_SCHEMA))
    settings.AGENTSITE_ADMIN_ONLY_TOOLS = ["shout"]

    reserved = {tool.name for tool in await registry.list_tools(CTX, ALL)}
    assert "shout" not in reserved and "computer_screenshot" in reserved
    assert (await registry.call("shout", {"word": "a"}, CTX)).is_error
    assert (await registry.call("shout", {"word": "a"}, ADMIN)).text == "A"

    settings.AGENTSITE_ADMIN_ONLY_TOOLS = []
    assert {"shout", "computer_screenshot"} <= {tool.name for tool in await registry.list_tools(CTX, ALL)}


class PerCallerSource(ToolSource):
    """Lists `private` to admins only, and records the contexts it was asked with."""

    name = "per-caller"

    def __init__(self):
        self.asked: list[ToolContext] = []

    async def list_tools(self, ctx: ToolContext) -> list[Tool]:
        self.asked.append(ctx)

        async def call(arguments, ctx):
            return ToolResult.of_text(f"private for {ctx.user_id}")

        return [Tool("private", "Admins only.", {"type": "object"}, call, source=self.name)] if ctx.is_admin else []


@pytest.fixture
def per_caller_source():
    source = PerCallerSource()
    registry.register_source(source)
    yield source
    registry.unregister_source(source.name)


@pytest.mark.django_db(transaction=True)
async def test_a_source_is_asked_with_the_caller_resolved_from_the_database(per_caller_source, admin, owner):
    admin_result = await registry.call("private", {}, ToolContext(user_id=admin.pk))
    owner_result = await registry.call("private", {}, ToolContext(user_id=owner.pk))
    anonymous = await registry.list_tools(ToolContext(), ALL)

    assert admin_result == ToolResult.of_text(f"private for {admin.pk}")
    assert owner_result.is_error and "There is no tool named 'private'" in owner_result.text
    assert "private" not in {tool.name for tool in anonymous}
    assert [(ctx.user_id, ctx.is_admin) for ctx in per_caller_source.asked] == [
        (admin.pk, True), (owner.pk, False), (None, False)]


@pytest.mark.django_db(transaction=True)
async def test_a_deactivated_admin_is_resolved_as_no_admin(per_caller_source, admin):
    admin.is_active = False
    await admin.asave()

    assert (await registry.call("private", {}, ToolContext(user_id=admin.pk))).is_error
    assert per_caller_source.asked[-1].is_admin is False

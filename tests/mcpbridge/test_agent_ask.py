"""`ask_<slug>` without a server (mcpbridge.ask): its name within 64 characters, the run as the MCP caller with
the agent recorded on the usage, and an agent the caller may not use answered as one that does not exist,
with nothing sent upstream (the fake upstream and a recording metering are the witnesses)."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from agents_app.services import agent_create
from agentsite.agent.tools import ToolContext
from agentsite.agent.usage import Caller
from catalogue.services import config_update
from mcpbridge import ask
from tests.fakes.llm import Text

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_tool_name_is_ask_and_the_slug_and_at_most_64_characters():
    assert ask.tool_name("helper") == "ask_helper"
    assert ask.tool_name("a" * 60) == "ask_" + "a" * 60
    long_one, long_two = ask.tool_name("a" * 63 + "b"), ask.tool_name("a" * 63 + "c")
    assert len(long_one) == len(long_two) == 64 and long_one != long_two
    assert long_one.startswith("ask_" + "a" * 51 + "_")


async def test_a_call_runs_the_agent_as_the_mcp_caller_and_records_the_agent(helper, owner, fake_openai, metering):
    fake_openai.script(Text("Hello from Helper."))
    ctx = ToolContext(owner.pk, False)
    assert "helper" in await ask.usable_slugs(ctx, Caller(owner.pk, facet="mcp"))
    result = await ask.ask("ask_helper", {"message": "hi"}, ctx, Caller(owner.pk, "7", "mcp"))
    assert (result.is_error, result.text) == (False, "Hello from Helper.")
    [sent] = fake_openai.bodies()
    assert sent["messages"] == [{"role": "system", "content": "You are Helper."}, {"role": "user", "content": "hi"}]
    assert "tools" not in sent  # its allowlist is empty: no tools
    [record] = metering.records
    assert (record.caller.user_id, record.caller.key_id, record.caller.facet, record.caller.agent) == (
        owner.pk, "7", "mcp", "helper")


async def test_an_agent_the_caller_may_not_use_is_not_found_like_one_that_does_not_exist(
        helper, other_user, fake_openai, metering):
    ctx = ToolContext(other_user.pk, False)
    assert "helper" not in await ask.usable_slugs(ctx, Caller(other_user.pk, facet="mcp"))
    refused = await ask.ask("ask_helper", {"message": "hi"}, ctx, Caller(other_user.pk, facet="mcp"))
    ghost = await ask.ask("ask_ghost", {"message": "hi"}, ctx, Caller(other_user.pk, facet="mcp"))
    assert refused.is_error and refused.text.startswith("not_found: ")
    assert ghost.is_error and ghost.text == refused.text.replace("ask_helper", "ask_ghost")
    assert fake_openai.bodies() == [] and metering.records == []


@pytest.mark.parametrize(("arguments", "code"), [({}, "invalid"), ({"message": 3}, "invalid"),
                                                 ({"message": ""}, "invalid"),
                                                 ({"message": "x" * 32_001}, "message_too_long")])
async def test_the_message_is_checked_before_anything_is_sent(helper, owner, fake_openai, arguments, code):
    result = await ask.ask("ask_helper", arguments, ToolContext(owner.pk, False), Caller(owner.pk, facet="mcp"))
    assert result.is_error and result.text.startswith(f"{code}: message")
    assert fake_openai.bodies() == []


async def test_an_upstream_failure_is_a_tool_error_naming_its_code(helper, owner, fake_openai):
    # The fake answers 500 with nothing scripted.
    result = await ask.ask("ask_helper", {"message": "hi"}, ToolContext(owner.pk, False), Caller(owner.pk, facet="mcp"))
    assert result.is_error and result.text.startswith("upstream_error: ")


async def test_an_admin_asks_an_agent_by_its_name_that_their_list_does_not_show(helper, admin, fake_openai):
    # Admins may use every agent by its name (as on /v1); their lists show theirs and those shared with them.
    fake_openai.script(Text("Hello, admin."))
    ctx = ToolContext(admin.pk, True)
    assert "helper" not in await ask.usable_slugs(ctx, Caller(admin.pk, facet="mcp"))
    result = await ask.ask("ask_helper", {"message": "hi"}, ctx, Caller(admin.pk, facet="mcp"))
    assert (result.is_error, result.text) == (False, "Hello, admin.")
    # An admin's API key without the `admin` scope acts as no admin: not found.
    refused = await ask.ask("ask_helper", {"message": "hi"}, ToolContext(admin.pk, False), Caller(admin.pk, "1", "mcp"))
    assert refused.is_error and refused.text.startswith("not_found: ")


async def test_an_agent_with_a_long_slug_is_asked_by_its_cut_name(owner, fake_openai):
    slug = "a" * 63 + "z"
    await sync_to_async(config_update)(changes={"provider": "openai", "base_url": fake_openai.base_url,
                                                "api_key": "sk-x", "model": "fake-model", "kb_enabled": False})
    await sync_to_async(agent_create)(owner=owner, data={"slug": slug, "name": "Long", "instructions": "Long.",
                                                         "tools": []})
    ctx, caller = ToolContext(owner.pk, False), Caller(owner.pk, facet="mcp")
    assert slug in await ask.usable_slugs(ctx, caller)
    fake_openai.script(Text("Long answer."))
    result = await ask.ask(ask.tool_name(slug), {"message": "hi"}, ctx, caller)
    assert (result.is_error, result.text) == (False, "Long answer.")
    assert fake_openai.bodies()[0]["messages"][0] == {"role": "system", "content": "Long."}
    missing = await ask.ask("ask_" + "a" * 60, {"message": "hi"}, ctx, caller)  # spells a slug nobody has
    assert missing.is_error and missing.text.startswith("not_found: ")

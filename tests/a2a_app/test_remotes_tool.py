"""The tool a2a_<name>: an agent run (the fake upstream scripting the call) asks a remote A2A agent and answers
with its reply; a remote that fails, asks for more, or is too slow is a tool error and the turn still completes;
only the callers the remote's rule lets in are offered the tool."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from a2a_app.remotes import MAX_MESSAGE_CHARS
from agentsite.agent.config import AgentSettings
from agentsite.agent.loop import run_agent
from agentsite.agent.tools import ToolContext, registry
from agentsite.agent.types import Message
from tests.conftest import client_for
from tests.fakes.llm import Call, Text, ToolCalls

pytestmark = pytest.mark.django_db(transaction=True)


def settings_for(fake_openai, *tools: str) -> AgentSettings:
    return AgentSettings(provider="openai", base_url=fake_openai.base_url, api_key="sk-x", model="m",
                         tools=tools, kb_enabled=False, request_timeout=10.0)


def _post(user, path: str, body: dict):
    return client_for(user).post(path, body, format="json")


async def registered(admin, agent, name: str = "echo", **extra) -> dict:
    response = await sync_to_async(_post)(admin, "/api/a2a/remotes", {"name": name, "url": agent.base_url, **extra})
    assert response.status_code == 201, response.content
    return response.json()


async def turn(fake_openai, user, message: str, tools: tuple[str, ...] = ("a2a_echo",)) -> tuple[list, dict]:
    """Run one turn in which the model calls a2a_echo with `message`; (the events, its tool_result's data, which
    the model was sent back)."""
    fake_openai.script(ToolCalls([Call("a2a_echo", {"message": message}, id="call_1")]), Text("Done."))
    events = [event async for event in run_agent(messages=[Message("user", "Ask the echo agent.")],
                                                 user_id=user.pk, settings=settings_for(fake_openai, *tools))]
    assert events[-1].type == "done", events[-1].data
    [result] = [event.data for event in events if event.type == "tool_result"]
    sent = fake_openai.bodies()[-1]
    tool_message = next(item for item in sent["messages"] if item["role"] == "tool")
    assert tool_message["content"] == ("[tool error] " if result["is_error"] else "") + result["content"]
    return events, result


async def test_an_agent_calls_the_remote_and_its_reply_comes_back_as_the_tool_result(
        admin, fake_openai, echo_agent, loopback_allowed):
    await registered(admin, echo_agent, headers={"Authorization": "Bearer k-77"})
    events, result = await turn(fake_openai, admin, "hello pelican")
    assert (result["name"], result["content"], result["is_error"]) == ("a2a_echo", "echo: hello pelican", False)
    assert events[-1].data["content"] == "Done."
    first = fake_openai.bodies()[0]
    [offered] = [tool["function"] for tool in first["tools"]]
    assert offered["name"] == "a2a_echo" and offered["parameters"]["required"] == ["message"]
    # The card's request and the call's carried the header.
    assert all(seen["authorization"] == "Bearer k-77" for seen in echo_agent.headers) and len(echo_agent.headers) >= 2


async def test_a_streaming_remote_is_streamed_and_its_chunks_joined(admin, fake_openai, streaming_agent,
                                                                    loopback_allowed):
    await registered(admin, streaming_agent)
    events, result = await turn(fake_openai, admin, "hello pelican")
    assert (result["content"], result["is_error"]) == ("echo: hello pelican", False)
    # Three chunks at once: the answer so far is told once, the next lines held back (PROGRESS_EVERY_S).
    assert [event.data["content"] for event in events if event.type == "tool_progress"] == ["answering: echo: "]


async def test_a_streaming_remotes_progress_becomes_the_tool_steps_progress(admin, fake_openai, streaming_agent,
                                                                            loopback_allowed):
    await registered(admin, streaming_agent)
    events, result = await turn(fake_openai, admin, "steps please")
    assert (result["content"], result["is_error"]) == ("first second", False)
    told = [event.data["content"] for event in events if event.type == "tool_progress"]
    # Its status message at once, then its answer so far: the second chunk came 0.6 s after the first, past the
    # 0.5 s between two lines of the answer so far.
    assert told == ["looking it up", "answering: first ", "answering: first second"], told
    kinds = [event.type for event in events]
    assert kinds.index("tool_call") < kinds.index("tool_progress") < kinds.index("tool_result")


@pytest.mark.parametrize(("message", "start"), [
    ("fail now", "task_failed: "), ("reject it", "task_failed: "), ("ask me", "input_required: ")])
async def test_a_remote_that_fails_is_a_tool_error_and_the_turn_completes(
        admin, fake_openai, echo_agent, loopback_allowed, message, start):
    await registered(admin, echo_agent)
    events, result = await turn(fake_openai, admin, message)
    assert result["content"].startswith(start) and result["is_error"] is True, result
    assert {"fail now": "the vault is closed", "reject it": "not my job", "ask me": "which city?"}[message] in (
        result["content"])
    assert events[-1].data["content"] == "Done."


async def test_a_slow_remote_times_out_as_a_tool_error_and_its_task_is_canceled(
        admin, fake_openai, streaming_agent, loopback_allowed):
    loopback_allowed.AGENTSITE_A2A_TIMEOUT_S = 1.0
    await registered(admin, streaming_agent)
    _, result = await turn(fake_openai, admin, "slow please")
    assert result["content"].startswith("timeout: ") and "within 1 s" in result["content"], result
    assert len(streaming_agent.cancelled) == 1


async def test_an_unreachable_remote_is_a_tool_error(admin, fake_openai, echo_agent, loopback_allowed):
    await registered(admin, echo_agent)
    loopback_allowed.AGENTSITE_ALLOW_PRIVATE_FETCH = False  # the guard now refuses the remote's address
    _, result = await turn(fake_openai, admin, "hello")
    assert result["content"].startswith("remote_unreachable: ") and result["is_error"] is True
    assert "AGENTSITE_ALLOW_PRIVATE_FETCH" in result["content"]


async def test_a_message_of_the_limit_is_sent_and_one_past_it_refused(admin, echo_agent, loopback_allowed):
    await registered(admin, echo_agent)
    ctx = ToolContext.for_user(admin)
    at_limit = await registry.call("a2a_echo", {"message": "x" * MAX_MESSAGE_CHARS}, ctx)
    past = await registry.call("a2a_echo", {"message": "x" * (MAX_MESSAGE_CHARS + 1)}, ctx)
    empty = await registry.call("a2a_echo", {"message": ""}, ctx)
    assert (at_limit.is_error, at_limit.text) == (False, "echo: " + "x" * MAX_MESSAGE_CHARS)
    assert past.is_error and empty.is_error and "Invalid arguments" in past.text


async def test_only_callers_the_rule_lets_in_are_offered_and_may_call_the_tool(
        admin, owner, other_user, echo_agent, loopback_allowed):
    await registered(admin, echo_agent, access={"visibility": "shared",
                                                "grants": [{"user": owner.pk, "role": "viewer"}]})
    for user, allowed in ((admin, True), (owner, True), (other_user, False)):
        ctx = ToolContext.for_user(user)
        names = {tool.name for tool in await registry.list_tools(ctx, enabled_only=False)}
        result = await registry.call("a2a_echo", {"message": "hi"}, ctx)
        assert ("a2a_echo" in names) is allowed
        assert (result.is_error, result.text) == ((False, "echo: hi") if allowed else
                                                  (True, "There is no tool named 'a2a_echo'."))


async def test_an_agent_allowlist_accepts_the_tool_for_an_owner_who_may_use_the_remote(
        admin, owner, other_user, echo_agent, loopback_allowed):
    await registered(admin, echo_agent, access={"visibility": "shared",
                                                "grants": [{"user": owner.pk, "role": "viewer"}]})
    body = {"slug": "asker", "name": "Asker", "instructions": "Ask.", "tools": ["a2a_echo"]}
    accepted = await sync_to_async(_post)(owner, "/api/agents", body)
    refused = await sync_to_async(_post)(other_user, "/api/agents", {**body, "slug": "asker2"})
    assert accepted.status_code == 201, accepted.content
    assert refused.status_code == 400 and "tools.0" in refused.json()["error"]["details"]


def _run_workflow(user, remote_tool: str, text: str) -> dict:
    from tests.workflows.conftest import graph, node

    flow = graph(node("in", "input"), node("ask", "tool", toolName=remote_tool, toolArgs={"message": "${in}"}),
                 node("out", "output"), edges=[("in", "ask"), ("ask", "out")])
    client = client_for(user)
    made = client.post("/api/workflows", {"name": f"asks-{remote_tool}-{len(text)}", **flow}, format="json")
    assert made.status_code == 201, made.content
    run = client.post(f"/api/workflows/{made.json()['id']}/run", {"input": text}, format="json")
    assert run.status_code == 200, run.content
    return run.json()


async def test_a_workflow_tool_node_calls_the_remote_and_a_failing_remote_fails_the_node(admin, echo_agent,
                                                                                        loopback_allowed):
    await registered(admin, echo_agent)
    run = await sync_to_async(_run_workflow)(admin, "a2a_echo", "hello heron")
    assert (run["status"], run["output"]) == ("success", "echo: hello heron"), run
    failed = await sync_to_async(_run_workflow)(admin, "a2a_echo", "fail now")
    assert failed["status"] == "error" and failed["error"] == {"node": "ask", "message": (
        "The tool a2a_echo failed: task_failed: The remote agent 'echo' failed the task: the vault is closed.")}

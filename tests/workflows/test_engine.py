"""The workflow engine on graphs in memory: order, concurrency, joins, branches, cycles, retries, failures."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from agentsite.agent.config import AgentSettings
from agentsite.agent.tools import Tool, ToolContext, ToolResult
from tests.agent.conftest import runtime_registries_without_facets  # noqa: F401 - autouse: no DB-backed sources
from tests.fakes.llm import Text
from tests.workflows.conftest import graph, node
from workflows.checks import validate
from workflows.engine import Execution
from workflows.graph import Graph, Problems, edges_from_wire, nodes_from_wire
from workflows.nodes import RunContext, format_output


def build(data: dict[str, Any]) -> Graph:
    problems = Problems()
    built = Graph(tuple(nodes_from_wire(data["nodes"], problems)), tuple(edges_from_wire(data["edges"], problems)))
    problems = validate(built, compile_check=None, problems=problems)
    assert not problems, problems.found
    return built


async def run(data: dict[str, Any], text: str = "hello", **kwargs: Any) -> tuple[Execution, list]:
    events: list = []
    ctx = RunContext(input=text, owner_id=None, emit=lambda kind, payload: events.append((kind, payload)))
    execution = Execution(build(data), ctx, **kwargs)
    await execution.run()
    return execution, events


def echo_tool(name: str, function) -> Tool:
    async def call(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return await function(arguments)

    return Tool(name, f"The test tool {name}.", {"type": "object"}, call, source="test", timeout=5)


async def test_a_chain_runs_in_order_and_the_output_node_formats_the_input():
    execution, events = await run(graph(node("start", "input"), node("wait", "delay", delayMs=0),
                                        node("out", "output", outputFormat="text"),
                                        edges=[("start", "wait"), ("wait", "out")]))
    assert execution.status == "success"
    assert execution.output == "hello"
    assert execution.outputs == {"start": "hello", "wait": "hello", "out": "hello"}
    assert [kind for kind, _ in events] == ["node_started", "node_finished"] * 3
    assert [entry.node for entry in execution.trace] == ["start", "wait", "out"]
    assert all(entry.status == "success" and entry.attempts == 1 for entry in execution.trace)


async def test_independent_branches_run_side_by_side(tool_source):
    """Each branch's tool waits until the other branch's tool has started: only branches that run at the
    same time can both finish (one after the other, the first would wait out its deadline and fail)."""
    started = {"a": asyncio.Event(), "b": asyncio.Event()}

    def meet(me: str, other: str):
        async def call(arguments):
            started[me].set()
            try:
                async with asyncio.timeout(5):
                    await started[other].wait()
            except TimeoutError:
                return ToolResult.error(f"branch {other} never started while branch {me} was running")
            return ToolResult.of_text(me)

        return call

    tool_source.extend([echo_tool("meet_a", meet("a", "b")), echo_tool("meet_b", meet("b", "a"))])
    data = graph(node("start", "input"), node("a", "tool", toolName="meet_a"), node("b", "tool", toolName="meet_b"),
                 node("join", "output", outputFormat="json"),
                 edges=[("start", "a"), ("start", "b"), ("a", "join"), ("b", "join")])
    execution, _ = await run(data)
    assert execution.status == "success", execution.error
    assert execution.output == {"a": "a", "b": "b"}


async def test_a_join_waits_for_every_reached_predecessor():
    data = graph(node("start", "input"), node("fast", "delay", delayMs=0), node("slow", "delay", delayMs=100),
                 node("join", "delay", delayMs=0), edges=[("start", "fast"), ("start", "slow"), ("fast", "join"),
                                                          ("slow", "join")])
    execution, _ = await run(data)
    order = [entry.node for entry in execution.trace]
    assert order.index("join") > order.index("slow")
    assert execution.outputs["join"] == {"fast": "hello", "slow": "hello"}


async def test_the_concurrency_cap_limits_how_many_nodes_run_at_once(tool_source):
    """Four nodes, a cap of two: each node waits until its pair has started. The peak count of nodes
    running is two (a cap of one would leave the first waiting on a second that never starts)."""
    entered: list[int] = []
    running = {"now": 0, "peak": 0}
    changed = asyncio.Condition()

    async def paired(arguments):
        async with changed:
            entered.append(len(entered))
            pair_full = 2 * (entered[-1] // 2 + 1)
            running["now"] += 1
            running["peak"] = max(running["peak"], running["now"])
            changed.notify_all()
            try:
                async with asyncio.timeout(5):
                    await changed.wait_for(lambda: len(entered) >= pair_full)
            except TimeoutError:
                return ToolResult.error(f"only {len(entered)} of {pair_full} nodes started")
            running["now"] -= 1
        return ToolResult.of_text("ok")

    tool_source.append(echo_tool("paired", paired))
    data = graph(node("start", "input"), *[node(f"d{index}", "tool", toolName="paired") for index in range(4)],
                 edges=[("start", f"d{index}") for index in range(4)])
    execution, _ = await run(data, max_concurrency=2)
    assert execution.status == "success", execution.error
    assert running["peak"] == 2


async def test_a_cycle_runs_each_node_once():
    data = graph(node("start", "input"), node("a", "delay", delayMs=0), node("b", "delay", delayMs=0),
                 node("out", "output"), edges=[("start", "a"), ("a", "b"), ("b", "a"), ("b", "out")])
    execution, _ = await run(data)
    assert execution.status == "success"
    assert [entry.node for entry in execution.trace] == ["start", "a", "b", "out"]


async def test_nodes_the_input_cannot_reach_never_run():
    data = graph(node("start", "input"), node("island", "delay", delayMs=0), node("out", "output"),
                 edges=[("start", "out")])
    execution, _ = await run(data)
    assert "island" not in execution.outputs


async def test_a_tool_node_substitutes_references_and_outputs_the_tools_text(tool_source):
    seen = []

    async def shout(arguments):
        seen.append(arguments)
        return ToolResult.of_text(arguments["text"].upper())

    tool_source.append(echo_tool("shout", shout))
    data = graph(node("start", "input"), node("loud", "tool", toolName="shout",
                                               toolArgs={"text": "${input} and ${start}", "raw": "${start}"}),
                 edges=[("start", "loud")])
    execution, _ = await run(data, "hi")
    assert execution.outputs["loud"] == "HI AND HI"
    assert seen == [{"text": "hi and hi", "raw": "hi"}]


async def test_a_failing_node_is_retried_with_backoff_until_it_succeeds(tool_source, monkeypatch):
    from workflows import engine

    calls, waits, jitters = [], [], []

    async def flaky(arguments):
        calls.append(list(waits))  # the backoffs waited before this attempt
        return ToolResult.error("not yet") if len(calls) < 3 else ToolResult.of_text("ok")

    async def recorded_sleep(seconds):  # the engine's clock: what it waits is recorded, not waited
        waits.append(seconds)

    monkeypatch.setattr(engine, "asyncio", SimpleNamespace(**{**vars(asyncio), "sleep": recorded_sleep}))
    monkeypatch.setattr(engine.random, "uniform", lambda low, high: jitters.append((low, high)) or 1.0)
    tool_source.append(echo_tool("flaky", flaky))
    data = graph(node("start", "input"), node("try", "tool", toolName="flaky", retry={"max": 3, "backoffMs": 20}),
                 edges=[("start", "try")])
    execution, _ = await run(data)
    entry = execution.trace[-1]
    assert (execution.status, entry.attempts, execution.outputs["try"]) == ("success", 3, "ok")
    # 20 ms, then 40 ms (exponential), each times a jitter drawn from 0.5-1.5 (1.0 here), before the retry.
    assert calls == [[], [0.02], [0.02, 0.04]]
    assert jitters == [(0.5, 1.5)] * 2


async def test_a_node_that_fails_with_on_error_continue_outputs_null_and_the_run_goes_on(tool_source):
    async def broken(arguments):
        return ToolResult.error("boom")

    tool_source.append(echo_tool("broken", broken))
    data = graph(node("start", "input"), node("try", "tool", toolName="broken", onError="continue"),
                 node("out", "output", outputFormat="json"), edges=[("start", "try"), ("try", "out")])
    execution, events = await run(data)
    assert execution.status == "success" and execution.outputs["try"] is None and execution.output is None
    entry = next(entry for entry in execution.trace if entry.node == "try")
    assert entry.status == "error" and "boom" in entry.error
    assert ("node_finished", {"node": "try", "status": "error", "duration_ms": entry.duration_ms,
                              "output": None}) in events


async def test_a_failing_node_stops_the_run_and_cancels_the_nodes_still_running(tool_source):
    async def broken(arguments):
        return ToolResult.error("boom")

    tool_source.append(echo_tool("broken", broken))
    # "slow" would wait ten minutes: the run can only have ended because the failure cancelled it.
    data = graph(node("start", "input"), node("slow", "delay", delayMs=600_000),
                 node("fail", "tool", toolName="broken"),
                 node("after", "output"), edges=[("start", "slow"), ("start", "fail"), ("fail", "after")])
    async with asyncio.timeout(30):  # a bound for a broken engine, not a measurement
        execution, _ = await run(data)
    assert execution.status == "error" and execution.error.node == "fail" and "boom" in execution.error.message
    statuses = {entry.node: entry.status for entry in execution.trace}
    assert statuses == {"start": "success", "slow": "cancelled", "fail": "error"}


async def test_cancelling_a_run_cancels_its_running_nodes():
    data = graph(node("start", "input"), node("slow", "delay", delayMs=600_000), edges=[("start", "slow")])
    slow_started = asyncio.Event()

    def emit(kind, payload):
        if (kind, payload.get("node")) == ("node_started", "slow"):
            slow_started.set()

    execution = Execution(build(data), RunContext(input="x", owner_id=None, emit=emit))
    task = asyncio.create_task(execution.run())
    async with asyncio.timeout(5):
        await slow_started.wait()
    task.cancel()
    await asyncio.wait({task})
    assert task.cancelled()
    assert [(entry.node, entry.status) for entry in execution.trace] == [("start", "success"), ("slow", "cancelled")]


async def test_an_llm_node_streams_its_tokens_and_outputs_the_reply(fake_openai, monkeypatch):
    from agentsite.agent import config

    settings = AgentSettings(provider="openai", base_url=fake_openai.base_url, api_key="k", model="m",
                             kb_enabled=False, request_timeout=5)
    monkeypatch.setattr(config, "_loader", lambda: settings)
    fake_openai.script(Text("Bonjour le monde", pieces=["Bonjour ", "le ", "monde"]))
    data = graph(node("start", "input"), node("translate", "llm", prompt="Translate: ${input}", model="other"),
                 edges=[("start", "translate")])
    execution, events = await run(data, "hello world")
    assert execution.outputs["translate"] == "Bonjour le monde"
    assert [payload["content"] for kind, payload in events if kind == "delta"] == ["Bonjour ", "le ", "monde"]
    sent = fake_openai.requests[-1].json()
    assert sent["model"] == "other" and sent["messages"][-1]["content"] == "Translate: hello world"


@pytest.mark.parametrize(("value", "output_format", "expected"), [
    ("plain", "text", "plain"), ({"a": 1}, "text", '{"a": 1}'), (None, "markdown", ""),
    ('{"a": [1, 2]}', "json", {"a": [1, 2]}), ("not json", "json", "not json"), ([1], "json", [1])])
def test_the_output_formats(value, output_format, expected):
    assert format_output(value, output_format) == expected


BRANCHES = graph({"id": "start", "name": "start", "type": "input"},
                 {"id": "check", "name": "check", "type": "condition", "config": {
                     "condition": "input.length > 3 && context.input === input", "trueBranch": "long",
                     "falseBranch": "short"}},
                 node("long", "code", code="return {kind: 'long', text: input};"),
                 node("short", "code", code="return {kind: 'short', text: input};"),
                 node("after_long", "delay", delayMs=0),
                 edges=[("start", "check"), ("long", "after_long")])


@pytest.mark.parametrize(("text", "chosen", "skipped"), [("hello", "long", "short"), ("hi", "short", "long")])
async def test_a_condition_continues_down_its_chosen_branch_only(text, chosen, skipped):
    execution, _ = await run(BRANCHES, text)
    assert execution.status == "success"
    assert execution.outputs["check"] == text  # a condition passes its own input on unchanged
    assert execution.outputs[chosen] == {"kind": chosen, "text": text}
    assert skipped not in execution.outputs
    assert ("after_long" in execution.outputs) == (chosen == "long")


async def test_a_code_node_sees_its_input_and_the_outputs_of_finished_nodes():
    data = graph(node("start", "input"), node("first", "code", code="return input.toUpperCase();"),
                 node("second", "code", code="return [input, context.outputs.start, context.input];"),
                 node("out", "output", outputFormat="json"), edges=[("start", "first"), ("first", "second"),
                                                                    ("second", "out")])
    execution, _ = await run(data, "abc")
    assert execution.output == ["ABC", "abc", "abc"]


async def test_a_code_node_that_throws_fails_the_run_with_the_javascript_error():
    data = graph(node("start", "input"), node("bad", "code", code="throw new Error('no way');"),
                 edges=[("start", "bad")])
    execution, _ = await run(data)
    assert execution.status == "error" and execution.error.node == "bad" and "no way" in execution.error.message

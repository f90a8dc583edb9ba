"""Traces of a real `serve` (daphne and the task cluster) exported over OTLP/HTTP to the loopback collector (issue
28, items 2 and 6): a chat turn with a tool call is one tree (the HTTP request, its agent turn, the turn's LLM calls
and its tool call); a workflow run queued by a request runs in a worker under that request's trace (the task, the
run, its nodes); a manual scheduled run too; and with AGENTSITE_OTEL_CAPTURE_CONTENT unset, no prompt, completion,
tool argument or result is in any span of these traces."""

from __future__ import annotations

import pytest
import requests

from tests import needs
from tests.e2e import UPSTREAM_KEY, poll, sse_events
from tests.fakes.llm import Call, Text, ToolCalls
from tests.observability.test_tracing import Collector
from tests.server import LiveServer
from tests.workflows.conftest import graph, node

pytestmark = pytest.mark.e2e

CHAT_PROMPT = "chat-prompt-words-81c3f0"
PAGE_TEXT = "page-words-e6b914"
CHAT_ANSWER = "chat-answer-words-2a7d55"
WORKFLOW_INPUT = "workflow-input-words-0b9e6c"
WORKFLOW_ANSWER = "workflow-answer-words-f3d218"
TASK_PROMPT = "task-prompt-words-9d4a71"
TASK_ANSWER = "task-answer-words-57c0e3"
SECRETS = (CHAT_PROMPT, PAGE_TEXT, CHAT_ANSWER, WORKFLOW_INPUT, WORKFLOW_ANSWER, TASK_PROMPT, TASK_ANSWER)

SERVER, CONSUMER, INTERNAL, CLIENT = 2, 5, 1, 3  # OTLP span kinds


@pytest.fixture(scope="module")
def traced(fake_openai_server):
    """A collector, and `serve` exporting to it (content capture off), its provider pointed at the fake."""
    needs.module("opentelemetry.sdk", "pip install -e '.[otel]'")
    needs.module("opentelemetry.exporter.otlp.proto.http", "pip install -e '.[otel]'")
    collector = Collector()
    server = LiveServer(env={"AGENTSITE_LOGIN_RATE_LIMIT": "1000", "AGENTSITE_ALLOW_PRIVATE_FETCH": "1",
                             "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url.removesuffix("/v1/traces"),
                             "OTEL_SERVICE_NAME": "agentsite-e2e", "AGENTSITE_OTEL_CAPTURE_CONTENT": "0"})
    try:
        server.start()
        headers = {"Authorization": f"Bearer {server.login()['token']}"}
        requests.patch(f"{server.base_url}/api/config", headers=headers, timeout=10, json={
            "provider": "openai", "base_url": fake_openai_server.base_url, "api_key": UPSTREAM_KEY,
            "model": "fake-model"}).raise_for_status()
        yield server, headers, collector
    finally:
        server.stop()
        collector.close()


def _api(traced, method: str, path: str, **kwargs) -> requests.Response:
    server, headers, _ = traced
    return requests.request(method, f"{server.base_url}{path}", headers=headers, timeout=30, **kwargs)


def _request_span(collector: Collector, method: str, route: str, request_id: str) -> dict:
    """The server span of the request this test made (told apart by its X-Request-Id)."""
    return poll(lambda: next((span for span in list(collector.spans) if span["name"] == f"{method} {route}"
                              and span["attributes"].get("agentsite.request_id") == request_id), None),
                f"the span of {method} {route}", timeout=15)


def _children(collector: Collector, parent: dict, name: str, count: int = 1) -> list[dict]:
    """The `count` spans named `name` whose parent is `parent` (waiting for the batches that bring them)."""
    def found():
        spans = [span for span in list(collector.spans) if span["parent"] == parent["span_id"]
                 and span["name"] == name]
        return spans if len(spans) >= count else None

    spans = poll(found, f"{count} span(s) {name!r} under {parent['name']!r}", timeout=15)
    assert len(spans) == count, spans
    assert {span["trace_id"] for span in spans} == {parent["trace_id"]}
    return spans


def _no_content(collector: Collector, trace_id: str) -> None:
    """Every span of the trace (attributes, events, status) without a prompt, completion, tool argument or result:
    AGENTSITE_OTEL_CAPTURE_CONTENT is unset."""
    spans = [span for span in list(collector.spans) if span["trace_id"] == trace_id]
    every = repr(spans)
    assert "gen_ai.tool.call.arguments" not in every and "gen_ai.input.messages" not in every
    for secret in SECRETS:
        assert secret not in every


def test_a_chat_turn_with_a_tool_call_is_one_tree(traced, fake_openai, fake_web):
    server, headers, collector = traced
    fake_web.page("/traced", f"<html><body><p>{PAGE_TEXT}</p></body></html>")
    fake_openai.script(ToolCalls([Call("web_fetch", {"url": fake_web.url("/traced")}, id="call_t1")]),
                       Text(CHAT_ANSWER))
    session = _api(traced, "POST", "/api/sessions", json={"name": "traced"}).json()["id"]
    with requests.post(f"{server.base_url}/api/sessions/{session}/chat", json={"message": CHAT_PROMPT},
                       headers=headers, stream=True, timeout=30) as response:
        events = [name for name, _ in sse_events(response) if name != "comment"]
        request_id = response.headers["X-Request-Id"]
    assert events[-1] == "done" and "tool_result" in events

    http = _request_span(collector, "POST", "/api/sessions/<uuid:pk>/chat", request_id)
    assert http["kind"] == SERVER and http["attributes"]["http.response.status_code"] == 200
    turn = _children(collector, http, "invoke_agent")[0]
    assert turn["kind"] == INTERNAL and turn["attributes"]["gen_ai.operation.name"] == "invoke_agent"
    chats = _children(collector, turn, "chat fake-model", count=2)
    assert all(span["kind"] == CLIENT and span["attributes"]["gen_ai.usage.output_tokens"] > 0 for span in chats)
    tool = _children(collector, turn, "execute_tool web_fetch")[0]
    assert tool["attributes"]["gen_ai.tool.name"] == "web_fetch"
    assert tool["attributes"]["gen_ai.tool.call.id"] == "call_t1"
    assert tool["attributes"]["agentsite.tool.source"] == "builtin"
    assert tool["attributes"]["agentsite.tool.is_error"] is False
    # The upstream saw each LLM call's own span as its parent.
    sent = {request.headers["traceparent"].split("-")[2] for request in fake_openai.requests}
    assert sent == {span["span_id"] for span in chats}
    _no_content(collector, http["trace_id"])


def test_a_queued_workflow_run_joins_the_trace_of_the_request_that_queued_it(traced, fake_openai):
    _, _, collector = traced
    fake_openai.script(Text(WORKFLOW_ANSWER))
    workflow = _api(traced, "POST", "/api/workflows", json={"name": "traced", **graph(
        node("in", "input"), node("ask", "llm", prompt="Answer: ${in}"), node("out", "output"),
        edges=[("in", "ask"), ("ask", "out")])}).json()
    queued = _api(traced, "POST", f"/api/workflows/{workflow['id']}/run", json={"input": WORKFLOW_INPUT,
                                                                               "async": True})
    assert queued.status_code == 202, queued.text
    run_id = queued.json()["id"]
    finished = poll(lambda: (run := _api(traced, "GET", f"/api/workflows/runs/{run_id}").json())["status"]
                    not in ("queued", "running") and run, "the cluster ran the queued run", timeout=30)
    assert finished["status"] == "success", finished

    http = _request_span(collector, "POST", "/api/workflows/<uuid:pk>/run", queued.headers["X-Request-Id"])
    task = _children(collector, http, "task workflows.tasks.workflow_run_task")[0]
    assert task["kind"] == CONSUMER and task["attributes"]["messaging.operation.type"] == "process"
    run = _children(collector, task, "invoke_workflow")[0]
    assert run["attributes"]["agentsite.workflow.run_id"] == run_id
    assert run["attributes"]["agentsite.workflow.run_status"] == "success"
    nodes = {span["attributes"]["agentsite.workflow.node"]: span for name in
             ("workflow node input", "workflow node llm", "workflow node output")
             for span in _children(collector, run, name)}
    assert set(nodes) == {"in", "ask", "out"}
    for name, span in nodes.items():
        assert span["attributes"]["agentsite.workflow.run_id"] == run_id
        assert span["attributes"]["agentsite.workflow.node_status"] == "success", name
        assert span["attributes"]["agentsite.workflow.attempts"] == 1
    assert nodes["ask"]["attributes"]["agentsite.workflow.node_type"] == "llm"
    turn = _children(collector, nodes["ask"], "invoke_agent")[0]
    _children(collector, turn, "chat fake-model")
    _no_content(collector, http["trace_id"])


def test_a_scheduled_run_queued_by_a_request_is_a_span_in_its_trace(traced, fake_openai):
    _, _, collector = traced
    fake_openai.script(Text(TASK_ANSWER))
    # Fires only on 29 February: no schedule run of its own comes while the test reads the history's newest run.
    task = _api(traced, "POST", "/api/scheduler/tasks", json={"name": "traced", "cron": "0 12 29 2 *",
                                                              "prompt": TASK_PROMPT, "timezone": "UTC"}).json()
    queued = _api(traced, "POST", f"/api/scheduler/run/{task['id']}")
    assert queued.status_code == 202, queued.text
    poll(lambda: _api(traced, "GET", f"/api/scheduler/history?task={task['id']}").json()["results"][0]["status"]
         not in ("queued", "running"), "the cluster ran the scheduled run", timeout=30)

    http = _request_span(collector, "POST", "/api/scheduler/run/<uuid:pk>", queued.headers["X-Request-Id"])
    worker = _children(collector, http, "task scheduler.tasks.task_runs_execute")[0]
    run = _children(collector, worker, "scheduled run")[0]
    attributes = run["attributes"]
    assert attributes["agentsite.task.id"] == task["id"] and attributes["agentsite.task.trigger"] == "manual"
    assert attributes["agentsite.task.run_id"] == queued.json()["id"]
    assert attributes["agentsite.task.run_status"] == "success"
    assert 0 <= attributes["agentsite.task.lag_s"] < 30 and attributes["agentsite.task.scheduled_for"]
    turn = _children(collector, run, "invoke_agent")[0]
    _children(collector, turn, "chat fake-model")
    _no_content(collector, http["trace_id"])

"""OpenTelemetry traces (issue 28, item 2) against a real OTLP/HTTP receiver on loopback that decodes the protobuf
payloads: an HTTP request's span by route template, an LLM call's span with the GenAI attributes, its
`traceparent` sent upstream, an agent turn's tree (its LLM calls and tool calls as children), and no prompt,
completion, tool argument or result recorded unless AGENTSITE_OTEL_CAPTURE_CONTENT=1; tracing off, opentelemetry
is never imported. The server's whole trees (a chat turn over HTTP, a queued workflow run, a scheduled run, across
the task queue) are in test_tracing_e2e.py."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentsite.agent.routing import Catalogue, Connection, Router
from agentsite.agent.types import ChatRequest, Message, ModelSettings
from agentsite.core import tracing
from tests import needs
from tests.fakes.llm import Text
from tests.server import ROOT

PROMPT = "prompt-words-3f9a1c"
ANSWER = "answer-words-77be02"


class Collector:
    """An OTLP/HTTP trace receiver on loopback: POST /v1/traces, protobuf bodies decoded into span dicts."""

    def __init__(self) -> None:
        self.spans: list[dict] = []
        self.lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with collector.lock:
                    for resource in request.resource_spans:
                        for scope in resource.scope_spans:
                            for span in scope.spans:
                                collector.spans.append(_as_dict(span))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _value(any_value):
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def _as_dict(span) -> dict:
    return {"name": span.name, "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
            "parent": span.parent_span_id.hex(), "kind": span.kind,
            "attributes": {a.key: _value(a.value) for a in span.attributes}, "status": span.status.code,
            "status_message": span.status.message,
            "events": [(event.name, {a.key: _value(a.value) for a in event.attributes}) for event in span.events]}


@pytest.fixture
def collector(monkeypatch):
    needs.module("opentelemetry.sdk", "pip install -e '.[otel]'")
    needs.module("opentelemetry.exporter.otlp.proto.http", "pip install -e '.[otel]'")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    received = Collector()
    monkeypatch.delenv("AGENTSITE_OTEL_CAPTURE_CONTENT", raising=False)
    tracing.configure(OTLPSpanExporter(endpoint=received.url))
    yield received
    tracing.shutdown()
    received.close()


def _ask(fake_openai) -> None:
    catalogue = Catalogue([Connection("hosted", "openai", fake_openai.base_url, "sk-x", timeout_s=5,
                                      models=("big",))], [], default_connection="hosted", default_model="big")
    fake_openai.script(Text(ANSWER, usage=(11, 4)))

    async def go():
        async for _ in Router(cooldown_s=0).stream_batches(catalogue.resolve("hosted/big"), ChatRequest(
                [Message("user", PROMPT)], settings=ModelSettings(model="big"))):
            pass

    asyncio.run(go())


def test_an_llm_call_is_a_genai_span_whose_context_goes_upstream(collector, fake_openai):
    _ask(fake_openai)
    tracing.flush()
    chat = [span for span in collector.spans if span["name"] == "chat big"]
    assert len(chat) == 1
    attributes = chat[0]["attributes"]
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.request.model"] == "big" and attributes["gen_ai.response.model"] == "big"
    assert attributes["gen_ai.usage.input_tokens"] == 11 and attributes["gen_ai.usage.output_tokens"] == 4
    assert attributes["gen_ai.provider.name"] == "openai"
    assert "gen_ai.input.messages" not in attributes and "gen_ai.output.messages" not in attributes
    # The upstream got the span's context as a W3C traceparent.
    traceparent = fake_openai.requests[-1].headers.get("traceparent")
    version, trace_id, parent_id, flags = traceparent.split("-")
    assert (version, trace_id, parent_id) == ("00", chat[0]["trace_id"], chat[0]["span_id"])
    assert int(flags, 16) & 1  # sampled
    every = repr(collector.spans)
    assert PROMPT not in every and ANSWER not in every


def test_content_is_recorded_only_when_asked(collector, fake_openai, monkeypatch):
    monkeypatch.setattr(tracing, "CAPTURE_CONTENT", True)
    _ask(fake_openai)
    tracing.flush()
    chat = next(span for span in collector.spans if span["name"] == "chat big")
    assert PROMPT in chat["attributes"]["gen_ai.input.messages"]
    assert ANSWER in chat["attributes"]["gen_ai.output.messages"]


@pytest.mark.django_db
def test_an_http_request_is_a_server_span_named_by_its_route(collector, owner_client):
    import uuid

    session_id = uuid.uuid4()
    response = owner_client.get(f"/api/sessions/{session_id}")
    assert response.status_code == 404
    tracing.flush()
    spans = [span for span in collector.spans if span["attributes"].get("http.route") == "/api/sessions/<uuid:pk>"]
    assert len(spans) == 1
    span = spans[0]
    assert span["name"] == "GET /api/sessions/<uuid:pk>" and span["kind"] == 2  # SERVER
    assert span["attributes"]["http.response.status_code"] == 404
    assert span["attributes"]["agentsite.request_id"] == response["X-Request-Id"]


# --- an agent turn ------------------------------------------------------------------------------------------

TOOL_ARGUMENT = "tool-argument-5d2e8b"
TOOL_OUTPUT = "tool-output-c41a97"


@pytest.fixture
def echo_tool():
    """A tool source "test" with one tool, `echo`, that answers its argument and TOOL_OUTPUT."""
    from agentsite.agent.tools import StaticToolSource, Tool, ToolResult, registry

    async def call(arguments, ctx):
        return ToolResult.of_text(f"{arguments['word']} {TOOL_OUTPUT}")

    tool = Tool("echo", "Says the word back.", {"type": "object", "properties": {"word": {"type": "string"}},
                                                "required": ["word"]}, call, source="test")
    registry.register_source(StaticToolSource("test", [tool]))
    yield tool
    registry.unregister_source("test")


def _turn(fake_openai) -> list:
    from agentsite.agent.config import AgentSettings
    from agentsite.agent.loop import run_agent
    from tests.fakes.llm import Call, ToolCalls

    fake_openai.script(ToolCalls([Call("echo", {"word": TOOL_ARGUMENT}, id="call_7")]), Text(ANSWER, usage=(20, 5)))
    settings = AgentSettings(provider="openai", base_url=fake_openai.base_url, api_key="sk-x", model="gpt-fake",
                             request_timeout=5.0, tools=("echo",))

    async def go():
        return [event async for event in run_agent(messages=[Message("user", PROMPT)], user_id=None,
                                                   settings=settings)]

    return asyncio.run(go())


def test_an_agent_turn_is_the_parent_of_its_llm_calls_and_tool_calls(collector, fake_openai, echo_tool):
    events = _turn(fake_openai)
    assert [event.type for event in events][-1] == "done"
    tracing.flush()
    turn = [span for span in collector.spans if span["name"] == "invoke_agent"]
    assert len(turn) == 1
    turn = turn[0]
    assert turn["parent"] == "" and turn["kind"] == 1  # a root here (no request around it); INTERNAL
    assert turn["attributes"]["gen_ai.operation.name"] == "invoke_agent"
    assert turn["attributes"]["gen_ai.request.model"] == "gpt-fake"
    assert turn["attributes"]["agentsite.agent.tool_calls"] == 1
    children = [span for span in collector.spans if span["parent"] == turn["span_id"]]
    for kind in ("input", "output"):  # the turn's usage: its LLM calls' summed
        assert turn["attributes"][f"gen_ai.usage.{kind}_tokens"] == sum(
            span["attributes"][f"gen_ai.usage.{kind}_tokens"] for span in children if span["name"].startswith("chat"))
    assert sorted(span["name"] for span in children) == ["chat gpt-fake", "chat gpt-fake", "execute_tool echo"]
    assert {span["trace_id"] for span in children} == {turn["trace_id"]}
    tool = next(span for span in children if span["name"] == "execute_tool echo")
    assert tool["attributes"]["gen_ai.operation.name"] == "execute_tool"
    assert tool["attributes"]["gen_ai.tool.name"] == "echo" and tool["attributes"]["gen_ai.tool.call.id"] == "call_7"
    assert tool["attributes"]["agentsite.tool.source"] == "test"
    assert tool["attributes"]["agentsite.tool.is_error"] is False and tool["status"] != 2  # not ERROR
    assert turn["attributes"]["gen_ai.response.finish_reasons"] == ["stop"]
    # Each upstream request named its own LLM call's span.
    assert {request.headers["traceparent"].split("-")[2] for request in fake_openai.requests} == {
        span["span_id"] for span in children if span["name"].startswith("chat")}
    every = repr(collector.spans)
    for secret in (PROMPT, ANSWER, TOOL_ARGUMENT, TOOL_OUTPUT):
        assert secret not in every


def test_a_failing_tool_call_is_an_error_span_and_an_unknown_tool_too(collector, fake_openai, echo_tool):
    from agentsite.agent.config import AgentSettings
    from agentsite.agent.loop import run_agent
    from tests.fakes.llm import Call, ToolCalls

    fake_openai.script(ToolCalls([Call("echo", {}, id="call_bad"), Call("nowhere", {}, id="call_none")]),
                       Text("ok"))
    settings = AgentSettings(provider="openai", base_url=fake_openai.base_url, api_key="sk-x", model="gpt-fake",
                             request_timeout=5.0, tools=("echo",))

    async def go():
        return [event async for event in run_agent(messages=[Message("user", "go")], user_id=None,
                                                   settings=settings)]

    asyncio.run(go())
    tracing.flush()
    tools = {span["attributes"]["gen_ai.tool.call.id"]: span for span in collector.spans
             if span["name"].startswith("execute_tool")}
    assert set(tools) == {"call_bad", "call_none"}
    for span in tools.values():
        assert span["attributes"]["agentsite.tool.is_error"] is True
        assert span["status"] == 2 and span["attributes"]["error.type"] == "tool_error"
    assert "agentsite.tool.source" not in tools["call_none"]["attributes"]  # no such tool: no source


def test_tool_arguments_and_results_are_recorded_only_when_asked(collector, fake_openai, echo_tool, monkeypatch):
    monkeypatch.setattr(tracing, "CAPTURE_CONTENT", True)
    _turn(fake_openai)
    tracing.flush()
    tool = next(span for span in collector.spans if span["name"] == "execute_tool echo")
    assert json.loads(tool["attributes"]["gen_ai.tool.call.arguments"]) == {"word": TOOL_ARGUMENT}
    assert TOOL_OUTPUT in tool["attributes"]["gen_ai.tool.call.result"]
    turn = next(span for span in collector.spans if span["name"] == "invoke_agent")
    assert ANSWER in turn["attributes"]["gen_ai.output.messages"]


# --- tracing off -------------------------------------------------------------------------------------------

OFF_PROBE = """
import asyncio, json, sys
import redis  # redis-py (8) imports opentelemetry itself when it is installed: what it imports is not ours
theirs = {name for name in sys.modules if name.startswith("opentelemetry")}
import agentsite.asgi  # sets Django up, as daphne does
from django.urls import get_resolver
get_resolver().url_patterns
from agentsite.agent.config import AgentSettings
from agentsite.agent.loop import run_agent
from agentsite.agent.tools import StaticToolSource, Tool, ToolResult, registry
from agentsite.agent.types import Message
from agentsite.core import taskqueue, tracing
from tests.fakes.llm import Call, FakeOpenAI, Text, ToolCalls

async def call(arguments, ctx):
    return ToolResult.of_text("done")

registry.register_source(StaticToolSource("probe", [Tool("probe", "p", {"type": "object"}, call, source="probe")]))
fake = FakeOpenAI().start()
fake.script(ToolCalls([Call("probe", {}, id="c1")]), Text("fine"))
settings = AgentSettings(provider="openai", base_url=fake.base_url, api_key="sk-x", model="m", request_timeout=5.0,
                         tools=("probe",))

async def turn():
    return [event.type async for event in run_agent(messages=[Message("user", "hi")], user_id=None, settings=settings)]

kinds = asyncio.run(turn())
task = {"id": "t1", "func": "x.y", "traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01", "success": True}
taskqueue.task_started(func=None, task=task)
taskqueue.task_finished(func=None, task=task)
print(json.dumps({"kinds": kinds, "enabled": tracing.ENABLED, "traceparent": tracing.traceparent(),
                  "imported": sorted(name for name in sys.modules if name.startswith("opentelemetry")
                                     and name not in theirs)}))
fake.stop()
"""


@pytest.mark.e2e
def test_tracing_off_never_imports_opentelemetry(tmp_path):
    """No collector named: an agent turn with a tool call and a traced task's hooks leave opentelemetry unimported."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env.update({"DJANGO_SETTINGS_MODULE": "agentsite.settings", "AGENTSITE_DATA_DIR": str(tmp_path)})
    out = subprocess.run([sys.executable, "-c", OFF_PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["kinds"][-1] == "done" and "tool_result" in found["kinds"]
    assert (found["enabled"], found["traceparent"], found["imported"]) == (False, None, [])

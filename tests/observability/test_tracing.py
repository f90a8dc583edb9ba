"""OpenTelemetry traces (issue 28, item 2) against a real OTLP/HTTP receiver on loopback that decodes the protobuf
payloads: an HTTP request's span by route template, an LLM call's span with the GenAI attributes, its
`traceparent` sent upstream, and no prompt or completion recorded unless AGENTSITE_OTEL_CAPTURE_CONTENT=1."""

from __future__ import annotations

import asyncio
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentsite.agent.routing import Catalogue, Connection, Router
from agentsite.agent.types import ChatRequest, Message, ModelSettings
from agentsite.core import tracing
from tests import needs
from tests.fakes.llm import Text

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
    return getattr(any_value, kind) if kind else None


def _as_dict(span) -> dict:
    return {"name": span.name, "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
            "parent": span.parent_span_id.hex(), "kind": span.kind,
            "attributes": {a.key: _value(a.value) for a in span.attributes}, "status": span.status.code}


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

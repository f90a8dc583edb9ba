"""OpenTelemetry traces (issue 28, item 2), an optional extra: `pip install agentsite[otel]`.

On when the standard variables name a collector (OTEL_EXPORTER_OTLP_ENDPOINT or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; OTEL_SDK_DISABLED=true turns it off) and the SDK is installed; otherwise
every function here is a no-op costing one global read, and opentelemetry is never imported. Spans go to the
collector over OTLP/HTTP (protobuf) from a batch processor; the exporter reads the other OTEL_* variables
(headers, timeout, ...) itself. This module keeps its own TracerProvider (not the process-global one), so
that nothing else in the process changes how it exports.

Spans: one per HTTP request (the outermost middleware), per LLM call (the router: GenAI semantic conventions,
`gen_ai.operation.name`, `gen_ai.request.model`, `gen_ai.response.model`, `gen_ai.usage.input_tokens` and
`output_tokens`, `gen_ai.provider.name`), whose context goes upstream as `traceparent`. Prompts and completions are
recorded only with AGENTSITE_OTEL_CAPTURE_CONTENT=1.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

ENABLED = False
CAPTURE_CONTENT = False
_tracer: list[Any] = [None]
_provider: list[Any] = [None]


def wanted() -> bool:
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def configure(exporter: Any = None) -> bool:
    """Start tracing if the environment asks for it (or with `exporter`, tests); returns whether it is on."""
    global ENABLED, CAPTURE_CONTENT
    CAPTURE_CONTENT = os.environ.get("AGENTSITE_OTEL_CAPTURE_CONTENT", "") in ("1", "true", "yes", "on")
    if exporter is None and not wanted():
        ENABLED = False
        return False
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:  # the extra is not installed: tracing stays off (the settings warn)
        ENABLED = False
        return False
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME",
                                                                                        "agentsite")}))
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=500))
    if _provider[0] is not None:
        _provider[0].shutdown()
    _provider[0], _tracer[0] = provider, provider.get_tracer("agentsite")
    ENABLED = True
    return True


def flush(timeout_s: float = 5.0) -> None:
    if _provider[0] is not None:
        _provider[0].force_flush(int(timeout_s * 1000))


def shutdown() -> None:
    global ENABLED
    ENABLED = False
    if _provider[0] is not None:
        _provider[0].shutdown()
    _provider[0] = _tracer[0] = None


@contextmanager
def span(name: str, kind: str = "internal", **attributes: Any) -> Iterator[Any]:
    """A span around the block, current inside it (None when tracing is off). An exception marks it as an
    error and goes on. Use only where the block does not yield (an async generator's body crosses contexts)."""
    if not ENABLED:
        yield None
        return
    from opentelemetry.trace import SpanKind

    kinds = {"internal": SpanKind.INTERNAL, "server": SpanKind.SERVER, "client": SpanKind.CLIENT}
    with _tracer[0].start_as_current_span(name, kind=kinds[kind],
                                          attributes={k: v for k, v in attributes.items() if v is not None}) as s:
        yield s


def start(name: str, kind: str = "client", /, **attributes: Any) -> Any:
    """A span that is not made current (for an async generator: end it with `end`); None when off."""
    if not ENABLED:
        return None
    from opentelemetry.trace import SpanKind

    return _tracer[0].start_span(name, kind=SpanKind.CLIENT if kind == "client" else SpanKind.INTERNAL,
                                 attributes={k: v for k, v in attributes.items() if v is not None})


@contextmanager
def current(span_: Any) -> Iterator[None]:
    """Make `span_` current for the block (e.g. while the upstream request is sent, so traceparent names it)."""
    if span_ is None:
        yield
        return
    from opentelemetry import trace

    with trace.use_span(span_, end_on_exit=False, record_exception=False, set_status_on_exception=False):
        yield


def end(span_: Any, error: BaseException | None = None, **attributes: Any) -> None:
    if span_ is None:
        return
    for key, value in attributes.items():
        if value is not None:
            span_.set_attribute(key, value)
    if error is not None:
        from opentelemetry.trace import Status, StatusCode

        span_.set_status(Status(StatusCode.ERROR, type(error).__name__))
        span_.set_attribute("error.type", type(error).__name__)
    span_.end()


def inject(headers: dict[str, str]) -> dict[str, str]:
    """Add `traceparent` (W3C) for the current span to outgoing headers (unchanged when tracing is off)."""
    if ENABLED:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        TraceContextTextMapPropagator().inject(headers)
    return headers

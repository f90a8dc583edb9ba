"""OpenTelemetry traces, an optional extra: `pip install agentsite[otel]`.

On when the standard variables name a collector (OTEL_EXPORTER_OTLP_ENDPOINT or ..._TRACES_ENDPOINT) and the SDK
is installed; otherwise every function is a no-op and opentelemetry is never imported. Spans go over OTLP/HTTP
from a batch processor on a TracerProvider of this module's own. docs/deploying.md lists the spans; content is
recorded only with AGENTSITE_OTEL_CAPTURE_CONTENT=1.

In async generators a span is made current only around a step that does not yield (`current`, `anext_in`,
`stream_in`): a context attached in one step and detached in another breaks both.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing, contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

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
        # Optional dependency: the OpenTelemetry SDK (the otel extra), imported only when tracing is on.
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:  # the extra is not installed: tracing stays off (the settings warn)
        ENABLED = False
        return False
    if exporter is None:
        # Optional dependency: the OTLP exporter (the otel extra), imported only when tracing is on.
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


def _kind(kind: str) -> Any:
    # Optional dependency: OpenTelemetry (the otel extra), imported only when tracing is on.
    from opentelemetry.trace import SpanKind

    return {"internal": SpanKind.INTERNAL, "server": SpanKind.SERVER, "client": SpanKind.CLIENT,
            "consumer": SpanKind.CONSUMER}[kind]


@contextmanager
def span(name: str, kind: str = "internal", **attributes: Any) -> Iterator[Any]:
    """A span around the block, current inside it (None when tracing is off). An exception marks it as an
    error (its type only) and goes on. Use only where the block does not yield (an async generator's body
    crosses contexts: use `start` and `end` there)."""
    if not ENABLED:
        yield None
        return
    with _tracer[0].start_as_current_span(name, kind=_kind(kind), record_exception=False,
                                          set_status_on_exception=False,
                                          attributes={k: v for k, v in attributes.items() if v is not None}) as s:
        try:
            yield s
        except BaseException as exc:
            annotate(s, exc)
            raise


def start(name: str, kind: str = "client", /, parent: Any = None, **attributes: Any) -> Any:
    """A span that is not made current (for an async generator: end it with `end`); None when off. Its parent
    is the current span, or `parent` (a span, or a context from `extract`) when given."""
    if not ENABLED:
        return None
    context = None
    if parent is not None:
        # Optional dependency: OpenTelemetry (the otel extra), imported only when tracing is on.
        from opentelemetry import context as otel_context
        from opentelemetry import trace

        context = parent if isinstance(parent, otel_context.Context) else trace.set_span_in_context(parent)
    return _tracer[0].start_span(name, context=context, kind=_kind(kind),
                                 attributes={k: v for k, v in attributes.items() if v is not None})


@contextmanager
def current(span_: Any) -> Iterator[None]:
    """Make `span_` current for the block (e.g. while the upstream request is sent, so traceparent names it)."""
    if span_ is None:
        yield
        return
    # Optional dependency: OpenTelemetry (the otel extra), imported only when tracing is on.
    from opentelemetry import trace

    with trace.use_span(span_, end_on_exit=False, record_exception=False, set_status_on_exception=False):
        yield


async def anext_in(span_: Any, iterator: AsyncIterator[T]) -> T:
    """`await anext(iterator)` with `span_` current while the step runs (an async generator's step: spans the
    iterator starts are children of `span_`). Raises StopAsyncIteration at the end, as anext does."""
    if span_ is None:
        return await anext(iterator)
    with current(span_):
        return await anext(iterator)


async def stream_in(span_: Any, content: AsyncIterator[T]) -> AsyncIterator[T]:
    """`content` with `span_` current during each of its steps, and `span_` ended when it ends (or fails, or is
    closed): a streamed response's span lasts as long as its stream."""
    error: BaseException | None = None
    try:
        async with aclosing(content):  # type: ignore[type-var]  # an async generator, closable
            while True:
                try:
                    item = await anext_in(span_, content)
                except StopAsyncIteration:
                    return
                yield item
    except BaseException as exc:
        error = exc
        raise
    finally:
        end(span_, error)


def annotate(span_: Any, error: BaseException | str | None = None, **attributes: Any) -> None:
    """Set attributes on a live span (None values are left out); `error` (an exception, or a short code) marks
    it failed with `error.type`: an exception's type, never its message."""
    if span_ is None:
        return
    for key, value in attributes.items():
        if value is not None:
            span_.set_attribute(key, value)
    if error is not None:
        # Optional dependency: OpenTelemetry (the otel extra), imported only when tracing is on.
        from opentelemetry.trace import Status, StatusCode

        kind = error if isinstance(error, str) else type(error).__name__
        span_.set_status(Status(StatusCode.ERROR, kind))
        span_.set_attribute("error.type", kind)


def end(span_: Any, error: BaseException | str | None = None, **attributes: Any) -> None:
    if span_ is None:
        return
    annotate(span_, error, **attributes)
    span_.end()


def attach(span_: Any) -> Any:
    """Make `span_` current until `detach(token)` (the same thread, the same context); None for None."""
    if span_ is None:
        return None
    # Optional dependency: OpenTelemetry (the otel extra), imported only when tracing is on.
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    return otel_context.attach(trace.set_span_in_context(span_))


def detach(token: Any) -> None:
    if token is not None:
        # Optional dependency: OpenTelemetry (the otel extra), imported only when tracing is on.
        from opentelemetry import context as otel_context

        otel_context.detach(token)


def traceparent() -> str | None:
    """The current span's W3C `traceparent` (None when tracing is off or no span is current): what a queued
    task carries so that its worker's spans join the trace."""
    if not ENABLED:
        return None
    return inject({}).get("traceparent")


def extract(value: str | None) -> Any:
    """The context a `traceparent` names (for `start(parent=...)`); None when off or there is none."""
    if not ENABLED or not value:
        return None
    # Optional dependency: OpenTelemetry (the otel extra), imported only when tracing is on.
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": value})


def inject(headers: dict[str, str]) -> dict[str, str]:
    """Add `traceparent` (W3C) for the current span to outgoing headers (unchanged when tracing is off)."""
    if ENABLED:
        # Optional dependency: OpenTelemetry (the otel extra), imported only when tracing is on.
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        TraceContextTextMapPropagator().inject(headers)
    return headers

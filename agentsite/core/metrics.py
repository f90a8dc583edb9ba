"""Prometheus metrics: what the server counts, and the text a scrape of `GET /metrics` reads.

Off unless AGENTSITE_METRICS=1: every recording function then returns at its first line and prometheus_client
is never imported. On, each process records into prometheus_client's multiprocess files under
PROMETHEUS_MULTIPROC_DIR, so one scrape of any process sees the sum over the host's processes.

Labels are bounded: none takes a value from user input (routes are URL templates, unknown methods and models are
`other`). Scrape-time values come from collectors apps register with `on_scrape`; the dashboard's health strip
reads the same collectors through `summary()`.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

ENABLED = False
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# Request durations are mostly a few ms (bench/RESULTS.md); upstream calls seconds to minutes.
HTTP_BUCKETS = (0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
LLM_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0)
LAG_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)

_metrics: dict[str, Any] = {}
_scrape_hooks: dict[str, Callable[[], list[tuple[str, str, float]]]] = {}


def configure(enabled: bool, data_dir: Path | None = None) -> None:
    """Called by the settings: turns recording on and, with a data directory, points multiprocess mode at
    `<data>/metrics/<host name>` (unless PROMETHEUS_MULTIPROC_DIR is set already). Writes nothing.

    The host's own directory: hosts sharing one data directory (containers on one volume, NFS) each scrape and
    empty only their own processes' files."""
    global ENABLED
    ENABLED = enabled
    if enabled and data_dir is not None and not os.environ.get(MULTIPROC_ENV):
        os.environ[MULTIPROC_ENV] = str(Path(data_dir) / "metrics" / socket.gethostname())


def multiproc_dir() -> Path | None:
    value = os.environ.get(MULTIPROC_ENV)
    return Path(value) if value else None


def clean_multiproc_dir() -> None:
    """Empty the multiprocess directory (serve, before its children start: the files of a previous run's
    processes would be summed into this one's)."""
    directory = multiproc_dir()
    if not ENABLED or directory is None:
        return
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True, exist_ok=True)


def process_exited(pid: int) -> None:
    """A child process of serve is gone: its live gauges (open streams, sandbox workers) stop counting."""
    if not ENABLED or multiproc_dir() is None:
        return
    # Start-up cost: prometheus_client is imported only when metrics are on.
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid)


def _m() -> dict[str, Any]:
    if _metrics:
        return _metrics
    # Start-up cost: prometheus_client is imported only when metrics are on.
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

    directory = multiproc_dir()
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
    # In multiprocess mode the values live in files and a scrape reads them all; the objects need no registry.
    registry = CollectorRegistry(auto_describe=True)
    kw: dict[str, Any] = {"registry": registry}
    built = {
        "registry": registry,
        "http_requests": Counter("agentsite_http_requests_total", "HTTP requests answered, by route template.",
                                 ["route", "method", "status"], **kw),
        "http_duration": Histogram("agentsite_http_request_duration_seconds",
                                   "Time to the response's headers, by route template.", ["route", "method"],
                                   buckets=HTTP_BUCKETS, **kw),
        "llm_requests": Counter("agentsite_llm_requests_total", "Requests to upstream LLMs, by outcome.",
                                ["model", "upstream", "status"], **kw),
        "llm_tokens": Counter("agentsite_llm_tokens_total", "Tokens the upstream counted, by kind (input/output).",
                              ["model", "kind"], **kw),
        "llm_ttft": Histogram("agentsite_llm_time_to_first_token_seconds",
                              "From sending a request upstream to its first event.", ["model"],
                              buckets=LLM_BUCKETS, **kw),
        "fallbacks": Counter("agentsite_upstream_fallbacks_total",
                             "Requests passed to an alias's next target after one failed.", **kw),
        "sse_open": Gauge("agentsite_sse_streams_open", "Server-sent event streams open now.",
                          multiprocess_mode="livesum", **kw),
        "workflow_runs": Counter("agentsite_workflow_runs_total", "Workflow runs finished, by status.",
                                 ["status"], **kw),
        "scheduler_lag": Histogram("agentsite_scheduler_lag_seconds",
                                   "A scheduled run's start minus its scheduled time.", buckets=LAG_BUCKETS, **kw),
        "sandbox_workers": Gauge("agentsite_sandbox_workers", "JavaScript sandbox worker processes, by state.",
                                 ["state"], multiprocess_mode="livesum", **kw),
        "budget_refusals": Counter("agentsite_budget_refusals_total", "Requests refused by a usage budget.", **kw),
    }
    _metrics.update(built)
    return _metrics


# --- recording (each a no-op while metrics are off) --------------------------------------------------------

def http_request(route: str, method: str, status: int, duration_s: float) -> None:
    if not ENABLED:
        return
    m = _m()
    method = method if method in HTTP_METHODS else "other"
    m["http_requests"].labels(route, method, str(status)).inc()
    m["http_duration"].labels(route, method).observe(duration_s)


def llm_request(model: str, upstream: str, status: str) -> None:
    if ENABLED:
        _m()["llm_requests"].labels(model, upstream, status).inc()


def llm_tokens(model: str, input_tokens: int, output_tokens: int) -> None:
    if not ENABLED:
        return
    m = _m()
    if input_tokens > 0:
        m["llm_tokens"].labels(model, "input").inc(input_tokens)
    if output_tokens > 0:
        m["llm_tokens"].labels(model, "output").inc(output_tokens)


def llm_first_token(model: str, seconds: float) -> None:
    if ENABLED:
        _m()["llm_ttft"].labels(model).observe(seconds)


def upstream_fallback() -> None:
    if ENABLED:
        _m()["fallbacks"].inc()


def sse_stream_opened(delta: int) -> None:
    if ENABLED:
        _m()["sse_open"].inc(delta)


def workflow_run_finished(status: str) -> None:
    if ENABLED:
        _m()["workflow_runs"].labels(status).inc()


def scheduler_lag(seconds: float) -> None:
    if ENABLED:
        _m()["scheduler_lag"].observe(max(seconds, 0.0))


def sandbox_workers(idle: int, busy: int) -> None:
    if not ENABLED:
        return
    gauge = _m()["sandbox_workers"]
    gauge.labels("idle").set(idle)
    gauge.labels("busy").set(busy)


def budget_refused() -> None:
    if ENABLED:
        _m()["budget_refusals"].inc()


# --- scrape ----------------------------------------------------------------------------------------------

def on_scrape(name: str, collect: Callable[[], list[tuple[str, str, float]]]) -> None:
    """Register `collect() -> [(metric name, help, value)]`, gauges read when /metrics is scraped (the task
    queue's depth: one number for the host, whichever process is scraped)."""
    _scrape_hooks[name] = collect


class _ScrapeCollector:
    def collect(self) -> Any:
        # Start-up cost: prometheus_client is imported only when metrics are on.
        from prometheus_client.core import GaugeMetricFamily

        for name, collect in list(_scrape_hooks.items()):
            try:
                values = collect()
            except Exception:  # a boundary: a broken collector must not break the scrape
                logger.exception("The metrics collector %r failed", name)
                continue
            for metric, help_text, value in values:
                yield GaugeMetricFamily(metric, help_text, value=value)


def _recorded() -> Any:
    """The registry that holds what every process of the host recorded (multiprocess), or this process's."""
    # Start-up cost: prometheus_client is imported only when metrics are on.
    from prometheus_client import CollectorRegistry

    metrics = _m()
    if multiproc_dir() is None:
        return metrics["registry"]
    # Start-up cost: prometheus_client is imported only when metrics are on.
    from prometheus_client import multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return registry


def render() -> tuple[bytes, str]:
    """The exposition text of every process of the host (multiprocess) or of this process, and its type."""
    # Start-up cost: prometheus_client is imported only when metrics are on.
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    scrape = CollectorRegistry()
    scrape.register(_ScrapeCollector())
    return generate_latest(_recorded()) + generate_latest(scrape), CONTENT_TYPE_LATEST


# --- the health strip ------------------------------------------------------------------------------------

def summary(*, leave_out_route: str = "") -> dict[str, Any]:
    """The figures of the dashboard's health strip, read from the same collectors a scrape reads (every process
    of the host): cumulative since the metrics started, so a reader makes rates from two of them (`at` is this
    answer's Unix time). `requests` counts HTTP requests answered, `errors` those answered 5xx, both without
    `leave_out_route` (the strip's own polling); `streams_open` is the open SSE streams; `first_token` the
    upstream time-to-first-token histogram summed over models (`buckets`: cumulative counts by upper bound
    `le`, as the exposition format writes them, `+Inf` last) with its median `p50` (null before any call).
    While metrics are off: `{"enabled": false}` and nothing else is read."""
    if not ENABLED:
        return {"enabled": False}

    requests = errors = 0.0
    streams = 0.0
    buckets: dict[str, float] = {}
    count = total = 0.0
    for family in _recorded().collect():
        for sample in family.samples:
            name, labels = sample.name, sample.labels
            if name == "agentsite_http_requests_total" and labels.get("route") != leave_out_route:
                requests += sample.value
                if labels.get("status", "").startswith("5"):
                    errors += sample.value
            elif name == "agentsite_sse_streams_open":
                streams += sample.value
            elif name == "agentsite_llm_time_to_first_token_seconds_bucket":
                buckets[labels["le"]] = buckets.get(labels["le"], 0.0) + sample.value
            elif name == "agentsite_llm_time_to_first_token_seconds_count":
                count += sample.value
            elif name == "agentsite_llm_time_to_first_token_seconds_sum":
                total += sample.value
    ordered = [{"le": le, "count": int(buckets.get(le, 0))} for le in (*(_le(b) for b in LLM_BUCKETS), "+Inf")]
    return {"enabled": True, "at": round(time.time(), 3), "requests": int(requests), "errors": int(errors),
            "streams_open": max(int(streams), 0),
            "first_token": {"count": int(count), "sum": round(total, 6), "buckets": ordered,
                            "p50": median(ordered)}}


def _le(bound: float) -> str:
    # Start-up cost: prometheus_client is imported only when metrics are on.
    from prometheus_client.utils import floatToGoString

    return str(floatToGoString(bound))


def median(buckets: list[dict[str, Any]]) -> float | None:
    """The 0.5 quantile of a cumulative histogram, as Prometheus' histogram_quantile estimates it: linear within
    the bucket the middle observation falls in; in the `+Inf` bucket, the largest finite bound. None if empty."""
    if not buckets or buckets[-1]["count"] <= 0:
        return None
    rank = buckets[-1]["count"] / 2
    lower, below = 0.0, 0
    for bucket in buckets:
        if bucket["count"] >= rank:
            if bucket["le"] == "+Inf":
                return lower
            upper = float(bucket["le"])
            inside = bucket["count"] - below
            return round(lower + (upper - lower) * ((rank - below) / inside if inside else 1.0), 6)
        lower, below = float(bucket["le"]), bucket["count"]
    return lower

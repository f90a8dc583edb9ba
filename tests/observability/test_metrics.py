"""GET /metrics (issue 28, item 1): a scrape after a known mix of requests shows the counters and histograms
it should; the door (off, token, loopback); the router's LLM metrics against a fake upstream on loopback;
labels that never grow with user input."""

from __future__ import annotations

import uuid
from collections import defaultdict

import pytest
from django.test import RequestFactory
from prometheus_client.parser import text_string_to_metric_families

from agentsite.agent.routing import Alias, AliasTarget, Catalogue, Connection, Router
from agentsite.agent.types import ChatRequest, Message, ModelSettings
from agentsite.core import metrics
from agentsite.core.errors import AppError
from agentsite.health import metrics_view
from tests.fakes.llm import Error, Text
from tests.observability.conftest import read_during_a_stream
from tests.server import refusing_port

REQUEST = ChatRequest([Message("user", "Hello?")], settings=ModelSettings(model="ignored"))


@pytest.fixture
def metrics_on(monkeypatch, settings):
    monkeypatch.setattr(metrics, "ENABLED", True)
    monkeypatch.delenv(metrics.MULTIPROC_ENV, raising=False)
    settings.AGENTSITE_METRICS_TOKEN = ""
    return metrics


def scrape(client) -> dict[tuple[str, frozenset], float]:
    response = client.get("/metrics")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    samples: dict[tuple[str, frozenset], float] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples, name: str, **labels) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def delta(before, after, name: str, **labels) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def label_values(samples) -> dict[tuple[str, str], set[str]]:
    found: dict[tuple[str, str], set[str]] = defaultdict(set)
    for (name, labels) in samples:
        for key, val in labels:
            if key != "le":
                found[(name, key)].add(val)
    return found


# --- the door -------------------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_metrics_are_off_by_default(anon_client, monkeypatch):
    monkeypatch.setattr(metrics, "ENABLED", False)
    response = anon_client.get("/metrics")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


@pytest.mark.django_db
def test_a_token_is_needed_when_one_is_set_and_loopback_otherwise(anon_client, metrics_on, settings):
    settings.AGENTSITE_METRICS_TOKEN = "metrics-token-7f3a9c"
    assert anon_client.get("/metrics").status_code == 401
    assert anon_client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    answered = anon_client.get("/metrics", HTTP_AUTHORIZATION="Bearer metrics-token-7f3a9c")
    assert answered.status_code == 200 and b"agentsite_http_requests_total" in answered.content
    # Without a token: loopback only (the test client is 127.0.0.1).
    settings.AGENTSITE_METRICS_TOKEN = ""
    assert anon_client.get("/metrics").status_code == 200
    remote = RequestFactory().get("/metrics", REMOTE_ADDR="10.1.2.3")
    assert metrics_view(remote).status_code == 403
    assert metrics_view(RequestFactory().get("/metrics", REMOTE_ADDR="::1")).status_code == 200
    assert metrics_view(RequestFactory().post("/metrics")).status_code == 405


# --- a known mix of requests ----------------------------------------------------------------------------------

@pytest.mark.django_db
def test_a_scrape_counts_a_known_mix_of_requests_by_route_template(anon_client, owner_client, metrics_on):
    before = scrape(anon_client)
    for _ in range(3):
        assert anon_client.get("/api/health").status_code == 200
    ids = [uuid.uuid4() for _ in range(4)]
    for session_id in ids:
        assert owner_client.get(f"/api/sessions/{session_id}").status_code == 404
    assert anon_client.get(f"/api/sessions/{ids[0]}").status_code == 401
    assert anon_client.get("/no/such/page/here").status_code == 404
    assert anon_client.delete("/api/health").status_code == 405
    after = scrape(anon_client)

    counter = "agentsite_http_requests_total"
    assert delta(before, after, counter, route="/api/health", method="GET", status="200") == 3
    assert delta(before, after, counter, route="/api/sessions/<uuid:pk>", method="GET", status="404") == 4
    assert delta(before, after, counter, route="/api/sessions/<uuid:pk>", method="GET", status="401") == 1
    assert delta(before, after, counter, route="<unmatched>", method="GET", status="404") == 1
    assert delta(before, after, counter, route="/api/health", method="DELETE", status="405") == 1
    # The first scrape itself was counted once it had answered.
    assert delta(before, after, counter, route="/metrics", method="GET", status="200") == 1
    histogram = "agentsite_http_request_duration_seconds"
    assert delta(before, after, histogram + "_count", route="/api/health", method="GET") == 3
    assert delta(before, after, histogram + "_bucket", route="/api/health", method="GET", le="+Inf") == 3
    assert delta(before, after, histogram + "_sum", route="/api/health", method="GET") > 0
    assert delta(before, after, histogram + "_count", route="/api/sessions/<uuid:pk>", method="GET") == 5
    # No raw id anywhere in the scrape.
    text = anon_client.get("/metrics").content.decode()
    assert not any(str(session_id) in text for session_id in ids)
    # The scrape-time gauge of the task queue is there.
    assert ("agentsite_task_queue_depth", frozenset()) in after


# --- the LLM metrics, at the router -----------------------------------------------------------------------------

@pytest.fixture
def second_upstream():
    from tests.fakes.llm import FakeOpenAI

    with FakeOpenAI() as server:
        yield server


def _catalogue(hosted_url: str, local_url: str, discover: bool = False) -> Catalogue:
    connections = [Connection("hosted", "openai", hosted_url, "sk-hosted-7f3a9c", timeout_s=5, models=("big",),
                              discover=discover),
                   Connection("local", "openai", local_url, "", timeout_s=5, models=("small",))]
    alias = Alias("smart", "fallback", (AliasTarget("hosted/big"), AliasTarget("local/small")))
    return Catalogue(connections, [alias], default_connection="hosted", default_model="smart")


@pytest.mark.django_db
async def test_llm_requests_tokens_first_token_and_fallbacks_are_counted(metrics_on, fake_openai, second_upstream):
    from django.test import AsyncClient

    client = AsyncClient()

    async def samples():
        response = await client.get("/metrics")
        assert response.status_code == 200
        parsed = {}
        for family in text_string_to_metric_families(response.content.decode()):
            for sample in family.samples:
                parsed[(sample.name, frozenset(sample.labels.items()))] = sample.value
        return parsed

    cat = _catalogue(fake_openai.base_url, second_upstream.base_url)
    router = Router(cooldown_s=0)
    before = await samples()
    # 1: streamed, answered by hosted (tokens 12 in, 7 out: the fake's usage).
    fake_openai.script(Text("hello there", usage=(12, 7)))
    async for _ in router.stream_batches(cat.resolve("smart"), REQUEST):
        pass
    # 2: hosted fails with a 503 before its first byte; local answers (a fallback).
    fake_openai.script(Error(503, "overloaded"))
    second_upstream.script(Text("from local", usage=(5, 3)))
    async for _ in router.stream_batches(cat.resolve("smart"), REQUEST):
        pass
    # 3: a whole reply (complete) from local directly.
    second_upstream.script(Text("whole", usage=(4, 2)))
    await router.complete(cat.resolve("local/small"), REQUEST)
    after = await samples()

    requests_total = "agentsite_llm_requests_total"
    assert delta(before, after, requests_total, model="hosted/big", upstream="hosted", status="ok") == 1
    assert delta(before, after, requests_total, model="hosted/big", upstream="hosted", status="503") == 1
    assert delta(before, after, requests_total, model="local/small", upstream="local", status="ok") == 2
    assert delta(before, after, "agentsite_upstream_fallbacks_total") == 1
    tokens = "agentsite_llm_tokens_total"
    assert delta(before, after, tokens, model="hosted/big", kind="input") == 12
    assert delta(before, after, tokens, model="hosted/big", kind="output") == 7
    assert delta(before, after, tokens, model="local/small", kind="input") == 9
    assert delta(before, after, tokens, model="local/small", kind="output") == 5
    ttft = "agentsite_llm_time_to_first_token_seconds"
    assert delta(before, after, ttft + "_count", model="hosted/big") == 1
    assert delta(before, after, ttft + "_count", model="local/small") == 1  # streamed once; complete has none
    assert delta(before, after, ttft + "_sum", model="hosted/big") > 0
    # An upstream that refuses the connection: status `error`, never the exception's words.
    refused = _catalogue(f"http://127.0.0.1:{refusing_port()}", second_upstream.base_url)
    with pytest.raises(AppError):
        await router.complete(refused.resolve("hosted/big"), REQUEST)
    final = await samples()
    assert delta(after, final, requests_total, model="hosted/big", upstream="hosted", status="error") == 1
    assert "sk-hosted-7f3a9c" not in (await client.get("/metrics")).content.decode()


# --- bounded labels ---------------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_no_label_grows_with_user_input(metrics_on, owner_client, fake_openai, second_upstream):
    """Drive N and then 3N distinct user inputs (ids in paths, unknown paths, odd methods, model names that do
    not exist, at /v1 and at a connection that accepts any name); no label's value set may grow."""
    import asyncio

    cat = _catalogue(fake_openai.base_url, second_upstream.base_url, discover=True)
    router = Router(cooldown_s=0)

    async def ask(name: str) -> None:
        try:
            async for _ in router.stream_batches(cat.resolve(name), REQUEST):
                pass
        except AppError:
            pass  # whatever the upstream answers to a name it does not know: the labels are the point

    def drive(count: int) -> None:
        for _ in range(count):
            marker = uuid.uuid4().hex
            owner_client.get(f"/api/sessions/{uuid.uuid4()}")
            owner_client.get(f"/api/{marker}/x")
            owner_client.get(f"/{marker}")
            owner_client.generic(f"M{marker[:6].upper()}", "/api/health")
            owner_client.post("/v1/chat/completions", {"model": f"nope-{marker}", "messages": [
                {"role": "user", "content": "hi"}]}, format="json")
            asyncio.run(ask(f"hosted/{marker}"))

    scrape(owner_client)  # the scrape's own route is counted once it has answered
    drive(3)
    first = label_values(scrape(owner_client))
    drive(9)
    second = label_values(scrape(owner_client))
    grown = {key: sorted(second[key] - first.get(key, set())) for key in second if second[key] - first.get(key, set())}
    assert not grown, f"labels grew with user input: {grown}"
    assert "other" in second[("agentsite_llm_requests_total", "model")]
    assert "other" in second[("agentsite_http_requests_total", "method")]


# --- workflow runs, scheduler lag, open streams -----------------------------------------------------------------

@pytest.mark.django_db
def test_workflow_runs_scheduler_lag_and_open_streams_reach_the_scrape(anon_client, owner, metrics_on):
    from datetime import timedelta

    from django.utils import timezone

    from agentsite.core.processes import current_process_id
    from scheduler import services as scheduler_services
    from scheduler.models import TaskRun
    from workflows import services as workflow_services
    from workflows.models import WorkflowRun

    before = scrape(anon_client)
    workflow = workflow_services.workflow_create(owner=owner, name="metrics-flow")
    for status in (WorkflowRun.SUCCESS, WorkflowRun.SUCCESS, WorkflowRun.ERROR):
        run = WorkflowRun.objects.create(workflow_id=workflow.id, owner_id=owner.pk, input="x", graph={},
                                         status=WorkflowRun.RUNNING, started_at=timezone.now(),
                                         process=current_process_id())
        workflow_services.run_finish(run=run, status=status, outputs={}, output=None, error=None, trace=[])
        # A second store of the same run changes nothing, and counts nothing.
        workflow_services.run_finish(run=run, status=status, outputs={}, output=None, error=None, trace=[])

    task = scheduler_services.task_create(owner=owner, name="lagging", cron="* * * * *", prompt="hi")
    late = TaskRun.objects.create(task=task, trigger=TaskRun.SCHEDULE, scheduled_for=timezone.now() - timedelta(
        seconds=7), status=TaskRun.QUEUED)
    manual = TaskRun.objects.create(task=task, trigger=TaskRun.MANUAL, scheduled_for=timezone.now() - timedelta(
        seconds=100), status=TaskRun.QUEUED)
    assert len(scheduler_services.runs_claim(run_ids=[late.pk, manual.pk])) == 2

    during = read_during_a_stream(lambda: scrape(anon_client))
    after = scrape(anon_client)
    assert delta(before, after, "agentsite_workflow_runs_total", status="success") == 2
    assert delta(before, after, "agentsite_workflow_runs_total", status="error") == 1
    assert delta(before, after, "agentsite_scheduler_lag_seconds_count") == 1  # the manual run is left out
    assert 7 <= delta(before, after, "agentsite_scheduler_lag_seconds_sum") < 60
    assert value(during, "agentsite_sse_streams_open") - value(before, "agentsite_sse_streams_open") == 1
    assert value(after, "agentsite_sse_streams_open") == value(before, "agentsite_sse_streams_open")

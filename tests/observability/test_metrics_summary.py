"""GET /api/metrics/summary (issue 28, item 5): the dashboard's health strip reads the same collectors a scrape of
/metrics reads. Admins only; `{"enabled": false}` while metrics are off; after a known mix of requests, streams
and upstream calls the totals, the 5xx count, the open streams and the first-token median are what was done."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from agentsite.core import metrics
from tests.observability.conftest import read_during_a_stream
from tests.observability.test_metrics import REQUEST, _catalogue, scrape

pytestmark = pytest.mark.django_db

SUMMARY = "/api/metrics/summary"


@pytest.fixture
def metrics_on(monkeypatch, settings):
    monkeypatch.setattr(metrics, "ENABLED", True)
    monkeypatch.delenv(metrics.MULTIPROC_ENV, raising=False)
    settings.AGENTSITE_METRICS_TOKEN = ""
    return metrics


def summary(client) -> dict:
    response = client.get(SUMMARY)
    assert response.status_code == 200, response.content
    return response.json()


def test_admins_only(anon_client, owner_client, admin_client, metrics_on):
    assert anon_client.get(SUMMARY).status_code == 401
    refused = owner_client.get(SUMMARY)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert admin_client.get(SUMMARY).status_code == 200


def test_metrics_off_answers_enabled_false_and_nothing_else(admin_client, monkeypatch):
    monkeypatch.setattr(metrics, "ENABLED", False)
    assert summary(admin_client) == {"enabled": False}


def test_totals_after_a_known_mix_of_requests(anon_client, owner_client, admin_client, metrics_on, monkeypatch):
    before = summary(admin_client)
    assert before["enabled"] is True and set(before) == {"enabled", "at", "requests", "errors", "streams_open",
                                                        "first_token"}
    for _ in range(3):
        assert anon_client.get("/api/health").status_code == 200
    for _ in range(2):
        assert owner_client.get(f"/api/sessions/{uuid.uuid4()}").status_code == 404
    assert owner_client.get(SUMMARY).status_code == 403  # refused, and like every poll of this route not counted
    for _ in range(4):
        summary(admin_client)  # the strip's own polls are left out
    after = summary(admin_client)
    assert after["requests"] - before["requests"] == 5
    assert after["errors"] == before["errors"]
    assert after["at"] >= before["at"]

    # A 5xx is an error: /api/health answers 503 while the database cannot be reached.
    from agentsite import health

    monkeypatch.setattr(health, "database_ok", lambda: False)
    assert anon_client.get("/api/health").status_code == 503
    monkeypatch.undo()
    monkeypatch.setattr(metrics, "ENABLED", True)
    failed = summary(admin_client)
    assert failed["requests"] - after["requests"] == 1 and failed["errors"] - after["errors"] == 1

    # The totals agree with a scrape of /metrics (the scrape itself is one more request once it has answered).
    samples = scrape(anon_client)
    scraped = sum(count for (name, labels), count in samples.items() if name == "agentsite_http_requests_total"
                  and dict(labels).get("route") != SUMMARY)
    assert summary(admin_client)["requests"] == scraped + 1


def test_open_streams_and_the_first_token_median(admin_client, metrics_on, fake_openai, second_upstream):
    from agentsite.agent.routing import Router
    from tests.fakes.llm import Text

    before = summary(admin_client)
    during = read_during_a_stream(lambda: summary(admin_client))
    assert during["streams_open"] - before["streams_open"] == 1
    assert summary(admin_client)["streams_open"] == before["streams_open"]

    router = Router(cooldown_s=0)
    cat = _catalogue(fake_openai.base_url, second_upstream.base_url)

    async def streamed(count: int) -> None:
        for _ in range(count):
            fake_openai.script(Text("hi", usage=(1, 1)))
            async for _ in router.stream_batches(cat.resolve("hosted/big"), REQUEST):
                pass

    asyncio.run(streamed(3))
    after = summary(admin_client)["first_token"]
    assert after["count"] - before["first_token"]["count"] == 3
    assert [bucket["le"] for bucket in after["buckets"]][-1] == "+Inf"
    assert after["buckets"][-1]["count"] == after["count"]
    counts = [bucket["count"] for bucket in after["buckets"]]
    assert counts == sorted(counts)  # cumulative
    # A loopback upstream answers its first event well under a second.
    assert after["p50"] is not None and 0 < after["p50"] <= 1.0
    assert after["sum"] > 0


def test_the_median_reads_the_buckets_like_histogram_quantile():
    def buckets(*pairs):
        return [{"le": le, "count": count} for le, count in pairs]

    assert metrics.median(buckets(("0.5", 0), ("+Inf", 0))) is None
    # 4 observations: the 2nd is the middle, in (0.5, 1.0], the first of the 3 there: 0.5 + 0.5 * 1/3.
    assert metrics.median(buckets(("0.5", 1), ("1.0", 4), ("+Inf", 4))) == pytest.approx(0.5 + 0.5 / 3, abs=1e-6)
    assert metrics.median(buckets(("0.5", 2), ("1.0", 2), ("+Inf", 2))) == pytest.approx(0.25)
    # Past the last finite bound: that bound (nothing better is known).
    assert metrics.median(buckets(("0.5", 0), ("1.0", 0), ("+Inf", 3))) == 1.0


@pytest.fixture
def second_upstream():
    from tests.fakes.llm import FakeOpenAI

    with FakeOpenAI() as server:
        yield server


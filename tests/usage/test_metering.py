"""Metering (issue 27, items 3-4): every call through a MeteredProvider is counted as the upstream counted it,
estimated when it said nothing (a hang-up), buffered and flushed as aggregates, and refused at the right call
by a budget, before the upstream is asked. Real parts: the OpenAI provider over HTTP to the fake upstream, the
test database (SQLite, or PostgreSQL + Redis on the CI's second pass: the budgets' counters then live in Redis).
"""

from __future__ import annotations

import math
import threading
from contextlib import aclosing

import pytest
from asgiref.sync import sync_to_async

from agentsite.agent.providers import OpenAIProvider, collect
from agentsite.agent.types import ChatRequest, Message, ModelSettings, TextDelta, Usage
from agentsite.agent.usage import Caller, CallRecord, metered
from agentsite.core.errors import AppError
from tests.fakes.llm import Hang, Text
from usage import budgets, buffer
from usage.models import ModelPrice, UsageDaily, UsageUserDaily, UserBudget

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _empty_buffer():
    buffer.flush()
    UsageDaily.objects.all().delete()
    UsageUserDaily.objects.all().delete()
    budgets.drop_user_budget(None)
    yield
    buffer.flush()


def _provider(fake) -> OpenAIProvider:
    return OpenAIProvider(base_url=fake.base_url, api_key="sk-test", model="fake-model", timeout=10)


def _request(text: str = "hello") -> ChatRequest:
    return ChatRequest([Message("user", text)])


async def _ask(provider, text: str = "hello"):
    return await collect(provider.stream(_request(text)))


def _rows():
    return list(UsageDaily.objects.values("user_id", "key_id", "facet", "model_requested", "model_answered",
                                          "requests", "errors", "interrupted", "estimated", "prompt_tokens",
                                          "completion_tokens", "cost"))


async def test_a_streamed_and_a_whole_call_are_recorded_as_the_upstream_counted_them(fake_openai, owner):
    fake_openai.script(Text("one two", usage=(12, 7)), Text("three", usage=(5, 3)))
    provider = metered(_provider(fake_openai), Caller(owner.pk, "key-1", "v1"))
    reply = await _ask(provider)
    assert reply.text == "one two" and reply.usage == Usage(12, 7)
    whole = await provider.complete(_request())
    assert whole.usage == Usage(5, 3)
    assert buffer.pending() == 2
    assert not await sync_to_async(_rows)()  # nothing written on the request's path
    await sync_to_async(buffer.flush)()
    assert await sync_to_async(_rows)() == [{
        "user_id": owner.pk, "key_id": "key-1", "facet": "v1", "model_requested": "fake-model",
        "model_answered": "fake-model", "requests": 2, "errors": 0, "interrupted": 0, "estimated": 0,
        "prompt_tokens": 17, "completion_tokens": 10, "cost": 0.0}]
    assert fake_openai.usage_total() == (17, 10)


async def test_a_call_the_client_hung_up_on_is_counted_from_the_stream(fake_openai, owner):
    fake_openai.script(Hang("four words streamed here"))
    provider = metered(_provider(fake_openai), Caller(owner.pk, facet="chat"))
    received = ""
    async with aclosing(provider.stream_batches(_request("x" * 40))) as batches:
        async for batch in batches:
            received = "".join(event.text for event in batch if isinstance(event, TextDelta))
            if received:
                break  # the client hangs up after the first text
    await sync_to_async(buffer.flush)()
    [row] = await sync_to_async(_rows)()
    assert (row["requests"], row["interrupted"], row["estimated"]) == (1, 1, 1)
    assert row["prompt_tokens"] == 10  # 40 characters, 4 a token
    assert received and row["completion_tokens"] == math.ceil(len(received) / 4)


async def test_an_upstream_failure_is_recorded_as_an_error(fake_openai, owner):
    provider = metered(_provider(fake_openai), Caller(owner.pk, facet="v1"))  # nothing scripted: a 500
    with pytest.raises(AppError):
        await _ask(provider)
    await sync_to_async(buffer.flush)()
    [row] = await sync_to_async(_rows)()
    assert (row["requests"], row["errors"]) == (1, 1)


def test_flushes_add_up_into_one_row_per_day_user_key_facet_and_model(owner):
    record = CallRecord(Caller(owner.pk, facet="v1"), "m", "m", 3, 4, 10.0, "ok", True)
    for _ in range(3):
        buffer.add(record, 0.5)
    buffer.flush()
    buffer.add(record, 0.5)
    buffer.add(CallRecord(Caller(owner.pk, facet="chat"), "m", "m", 1, 1, 1.0, "ok", True), 0.0)
    buffer.flush()
    rows = {row["facet"]: row for row in _rows()}
    assert (rows["v1"]["requests"], rows["v1"]["prompt_tokens"], rows["v1"]["completion_tokens"]) == (4, 12, 16)
    assert rows["v1"]["cost"] == pytest.approx(2.0)
    assert rows["chat"]["requests"] == 1
    [rollup] = UsageUserDaily.objects.values("requests", "prompt_tokens", "completion_tokens")
    assert rollup == {"requests": 5, "prompt_tokens": 13, "completion_tokens": 17}


async def test_the_price_table_gives_the_cost(fake_openai, owner):
    await sync_to_async(ModelPrice.objects.create)(model="fake-model", input_per_million=2.0, output_per_million=10.0)
    from usage.metering import prices

    prices.drop()
    fake_openai.script(Text("x", usage=(1000, 500)))
    await _ask(metered(_provider(fake_openai), Caller(owner.pk, facet="v1")))
    await sync_to_async(buffer.flush)()
    [row] = await sync_to_async(_rows)()
    assert row["cost"] == pytest.approx((1000 * 2.0 + 500 * 10.0) / 1_000_000)


async def test_a_token_budget_refuses_the_call_whose_worst_case_no_longer_fits_before_the_upstream_is_asked(
        fake_openai, owner):
    await sync_to_async(UserBudget.objects.create)(user=owner, budget={"tokens_per_day": 40})
    fake_openai.script(*[Text("answer", usage=(12, 7)) for _ in range(5)])
    provider = metered(_provider(fake_openai), Caller(owner.pk, facet="v1"))
    request = ChatRequest([Message("user", "hello")], settings=ModelSettings(max_tokens=7))  # 2 + 7 at worst
    for _ in range(2):  # 0, then 19 used before each: 40 and 21 left, room for 9
        assert (await collect(provider.stream(request))).text == "answer"
    with pytest.raises(AppError) as refused:  # 38 used: 2 left
        await collect(provider.stream(request))
    assert (refused.value.code, refused.value.status) == ("budget_exceeded", 429)
    assert (refused.value.details["needed"], refused.value.details["left"]) == (9, 2)
    assert 0 < int(refused.value.headers["Retry-After"]) <= 86400
    assert len(fake_openai.bodies()) == 2  # the refused call never reached the upstream


async def test_a_keys_budget_binds_calls_made_with_it_and_not_the_users_others(fake_openai, owner, one_minute):
    fake_openai.script(*[Text("answer", usage=(1, 1)) for _ in range(4)])
    with_key = metered(_provider(fake_openai), Caller(owner.pk, "k1", "v1", {"requests_per_minute": 1}))
    await _ask(with_key)
    with pytest.raises(AppError) as refused:
        await _ask(with_key)
    assert refused.value.code == "rate_limited" and "API key" in refused.value.message
    assert 0 < int(refused.value.headers["Retry-After"]) <= 60
    await _ask(metered(_provider(fake_openai), Caller(owner.pk, facet="chat")))  # no key: not bound by it


def test_fifty_concurrent_reservations_against_ten_requests_a_minute_let_ten_through(owner):
    scope = [budgets.Scope(f"u:{owner.pk}", {"requests_per_minute": 10})]
    windows = budgets.Windows.at()
    passed, refused = [], []
    start = threading.Barrier(50)

    def one() -> None:
        from django.db import connection

        start.wait()
        try:
            budgets.reserve(scope, windows)
            passed.append(1)
        except AppError as exc:
            refused.append(exc.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=one) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(passed) == 10 and refused == ["rate_limited"] * 40


def test_what_is_left_of_a_budget(owner, one_minute):
    UserBudget.objects.create(user=owner, budget={"tokens_per_day": 100, "requests_per_minute": 5})
    scope = budgets.Scope(f"u:{owner.pk}", {"tokens_per_day": 100, "requests_per_minute": 5})
    budgets.reserve([scope])
    budgets.settle([scope], 30, 0.0)
    left = budgets.remaining(scope)
    assert left["tokens_per_day"] == {"limit": 100, "used": 30, "remaining": 70,
                                      "resets_at": left["tokens_per_day"]["resets_at"]}
    assert left["requests_per_minute"]["used"] == 1 and left["requests_per_minute"]["remaining"] == 4
    assert left["cost_per_month"]["limit"] is None and left["cost_per_month"]["remaining"] is None


async def test_a_scheduled_prompt_refused_by_its_owners_budget_fails_with_the_reason(owner):
    """The scheduler's runner raises the refusal, which the run records as its error (scheduler.services)."""
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from scheduler.runner import agent_runner

    await sync_to_async(UserBudget.objects.create)(user=owner, budget={"requests_per_minute": 0})
    task = SimpleNamespace(owner_id=owner.pk, prompt="hi", workflow_id=None, session_id=None, model="", agent_id=None)
    with pytest.raises(AppError) as failed:
        await agent_runner(task=task, scheduled_for=datetime.now(UTC))
    assert failed.value.code == "rate_limited" and "requests_per_minute" in failed.value.message


def test_one_minute_holds_every_window_at_the_moment_the_test_began(one_minute, monkeypatch):
    """The conftest's fixture the per-minute tests above rely on: later calls count in the window it began in."""
    monkeypatch.setattr(budgets.time, "time", lambda: one_minute + 120.0)  # two minutes on
    held = budgets.Windows.at()
    assert (held.now, held.minute) == (one_minute, f"m{int(one_minute // 60)}")
    assert budgets.Windows.at(one_minute + 120.0).minute != held.minute  # an explicit moment is still its own

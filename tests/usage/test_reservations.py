"""Budgets reserve each call's worst case before it and settle the actual after (issue 41, item 4): a call passes
when its worst case fits in what is left (exactly what is left passes, one more is refused), concurrent calls
together stay within the limit, and a call releases its hold however it ends (finished, failed, cancelled).

Both counter stores run for real: the database (SQLite, or PostgreSQL on the CI's second pass) and, when
REDIS_URL is set, Redis; the LLM calls go over HTTP to the fake upstream through the OpenAI provider.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from contextlib import aclosing

import pytest
from asgiref.sync import sync_to_async

from agentsite.agent.providers import OpenAIProvider, collect
from agentsite.agent.types import ChatRequest, Message, ModelSettings, TextDelta
from agentsite.agent.usage import Caller, metered, prompt_estimate
from agentsite.core.errors import AppError
from tests.fakes.llm import Hang, Text
from tests.usage.gated import gated_stream
from usage import budgets, buffer
from usage.models import UserBudget

pytestmark = pytest.mark.django_db(transaction=True)

DEADLINE_S = 5.0


@pytest.fixture(params=["database", "redis"])
def backend(request, settings):
    """The budget counters in the database, then (when the run has Redis) in Redis."""
    if request.param == "database":
        settings.REDIS_URL = ""
    elif not os.environ.get("REDIS_URL"):
        pytest.skip("no REDIS_URL: the Redis store runs on the PostgreSQL + Redis pass")
    budgets.drop_user_budget(None)
    yield request.param
    buffer.flush()


def _scope(owner, **limits) -> budgets.Scope:
    return budgets.Scope(f"u:{owner.pk}", limits)


def _provider(fake) -> OpenAIProvider:
    return OpenAIProvider(base_url=fake.base_url, api_key="sk-test", model="fake-model", timeout=10)


def _request(text: str = "hello", max_tokens: int | None = 10) -> ChatRequest:
    return ChatRequest([Message("user", text)], settings=ModelSettings(max_tokens=max_tokens))


def _held(scope: budgets.Scope) -> float:
    return budgets.used(scope)["h"]["t"]


async def _poll(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not await sync_to_async(condition)():
        if time.monotonic() > deadline:
            raise AssertionError(f"within {DEADLINE_S} s: {what}")
        await asyncio.sleep(0.01)


# --- the rule at its boundary ------------------------------------------------------------------------------

def test_a_reservation_of_exactly_what_is_left_passes_and_one_more_is_refused(owner, backend):
    scope = _scope(owner, tokens_per_day=100)
    budgets.settle([scope], 60, 0.0, hold=budgets.reserve([scope], tokens=0))  # 60 used: 40 left
    with pytest.raises(AppError) as refused:
        budgets.reserve([scope], tokens=41)
    assert (refused.value.code, refused.value.status) == ("budget_exceeded", 429)
    assert refused.value.details == {"limit": "tokens_per_day", "retry_after": refused.value.details["retry_after"],
                                     "needed": 41, "left": 40}
    hold = budgets.reserve([scope], tokens=40)  # exactly what is left
    assert _held(scope) == 40
    with pytest.raises(AppError) as spent:  # held by the call in flight: nothing left for another
        budgets.reserve([scope], tokens=1)
    assert spent.value.details["left"] == 0
    assert budgets.remaining(scope)["tokens_per_day"]["remaining"] == 0
    budgets.settle([scope], 25, 0.0, hold=hold)  # it used less than its worst case: the rest is free again
    assert _held(scope) == 0
    left = budgets.remaining(scope)["tokens_per_day"]
    assert (left["used"], left["remaining"]) == (85, 15)
    budgets.reserve([scope], tokens=15)


def test_a_cost_budget_holds_the_worst_cost_and_refuses_past_it(owner, backend):
    scope = _scope(owner, cost_per_month=1.0)
    first = budgets.reserve([scope], cost=0.75)
    with pytest.raises(AppError) as refused:
        budgets.reserve([scope], cost=0.26)
    assert refused.value.code == "budget_exceeded" and refused.value.details["limit"] == "cost_per_month"
    second = budgets.reserve([scope], cost=0.25)  # 0.75 + 0.25: exactly the limit
    budgets.settle([scope], 10, 0.5, hold=first)
    assert budgets.remaining(scope)["cost_per_month"]["remaining"] == pytest.approx(0.25)
    budgets.settle([scope], 10, 0.5, hold=second)  # 1.0 used: nothing left
    with pytest.raises(AppError) as spent:  # not even a call of no known cost (a model without a price)
        budgets.reserve([scope], cost=0.0)
    assert spent.value.details["left"] == 0


async def test_a_call_whose_prompt_and_max_tokens_fill_the_budget_exactly_is_answered_one_more_is_refused(
        fake_openai, owner, backend):
    request = _request("hello", max_tokens=10)
    worst = prompt_estimate(request) + 10
    assert worst == 12  # 5 characters: 2 tokens, and 10 for the reply
    await sync_to_async(UserBudget.objects.create)(user=owner, budget={"tokens_per_day": worst - 1})
    fake_openai.script(Text("fine", usage=(2, 3)))
    provider = metered(_provider(fake_openai), Caller(owner.pk, facet="v1"))
    with pytest.raises(AppError) as refused:
        await collect(provider.stream(request))
    assert refused.value.code == "budget_exceeded" and refused.value.details == {
        "limit": "tokens_per_day", "retry_after": refused.value.details["retry_after"], "needed": 12, "left": 11}
    assert fake_openai.bodies() == []  # refused before the upstream was asked
    await sync_to_async(UserBudget.objects.filter(user=owner).update)(budget={"tokens_per_day": worst})
    budgets.drop_user_budget(None)
    assert (await collect(provider.stream(request))).text == "fine"
    left = (await sync_to_async(budgets.remaining)(_scope(owner, tokens_per_day=worst)))["tokens_per_day"]
    assert (left["used"], left["remaining"]) == (5, 7)  # settled at what the upstream counted


async def test_a_call_without_max_tokens_reserves_the_configured_default_cap(fake_openai, owner, backend, settings):
    await sync_to_async(UserBudget.objects.create)(user=owner, budget={"tokens_per_day": 12})
    fake_openai.script(Text("fine", usage=(2, 3)))
    provider = metered(_provider(fake_openai), Caller(owner.pk, facet="chat"))
    settings.AGENTSITE_BUDGET_DEFAULT_MAX_TOKENS = 11  # 2 + 11: past 12
    with pytest.raises(AppError) as refused:
        await collect(provider.stream(_request(max_tokens=None)))
    assert refused.value.details["needed"] == 13
    settings.AGENTSITE_BUDGET_DEFAULT_MAX_TOKENS = 10  # 2 + 10: exactly 12
    assert (await collect(provider.stream(_request(max_tokens=None)))).text == "fine"


# --- concurrency -------------------------------------------------------------------------------------------

async def test_eight_concurrent_calls_against_a_hundred_tokens_a_day_spend_at_most_the_limit(
        fake_openai, owner, backend):
    """Every call is in flight (its stream started, its usage not yet known) while the others are admitted:
    without reservations all eight passed and spent 8 x 32; with them, three worst cases fit in 100."""
    await sync_to_async(UserBudget.objects.create)(user=owner, budget={"tokens_per_day": 100})
    step = threading.Semaphore(0)
    request = _request("hello", max_tokens=30)
    reservation = prompt_estimate(request) + 30  # 32
    fake_openai.script(*[gated_stream(step, (2, 30)) for _ in range(8)])
    provider = metered(_provider(fake_openai), Caller(owner.pk, facet="v1"))
    calls = [asyncio.ensure_future(collect(provider.stream(request))) for _ in range(8)]
    refused = lambda: [call for call in calls if call.done() and call.exception() is not None]  # noqa: E731
    await _poll(lambda: len(fake_openai.bodies()) + len(refused()) == 8,
                "every call either reached the upstream or was refused")
    for _ in range(8):
        step.release()
    results = await asyncio.gather(*calls, return_exceptions=True)
    answered = [result for result in results if not isinstance(result, BaseException)]
    codes = [result.code for result in results if isinstance(result, AppError)]
    assert len(answered) + len(codes) == 8 and set(codes) == {"budget_exceeded"}
    scope = _scope(owner, tokens_per_day=100)
    spent = (await sync_to_async(budgets.used)(scope))["d"]["t"]
    assert spent == 32 * len(answered) and spent <= 100  # within the limit (the bound: limit + one reservation)
    assert len(answered) == 100 // reservation == 3
    assert await sync_to_async(_held)(scope) == 0


def test_eight_threads_reserving_at_once_fit_three_worst_cases_in_a_hundred(owner, backend):
    """The store's own atomicity: eight reservations of 32 racing from eight threads (eight connections)."""
    scope = _scope(owner, tokens_per_day=100)
    passed, refused = [], []
    start = threading.Barrier(8)

    def one() -> None:
        from django.db import connection

        start.wait()
        try:
            passed.append(budgets.reserve([scope], tokens=32))
        except AppError as exc:
            refused.append(exc.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=one) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(passed) == 3 and refused == ["budget_exceeded"] * 5
    assert _held(scope) == 96


# --- a hold is released however the call ends ---------------------------------------------------------------

async def test_a_cancelled_call_releases_its_reservation_and_is_charged_what_it_streamed(fake_openai, owner, backend):
    await sync_to_async(UserBudget.objects.create)(user=owner, budget={"tokens_per_day": 1000})
    scope = _scope(owner, tokens_per_day=1000)
    fake_openai.script(Hang("some words streamed here"))
    provider = metered(_provider(fake_openai), Caller(owner.pk, facet="chat"))
    first_text = asyncio.Event()

    async def consume() -> None:
        async with aclosing(provider.stream_batches(_request("x" * 40, max_tokens=100))) as batches:
            async for batch in batches:
                if any(isinstance(event, TextDelta) and event.text for event in batch):
                    first_text.set()

    call = asyncio.ensure_future(consume())
    async with asyncio.timeout(DEADLINE_S):
        await first_text.wait()
    assert await sync_to_async(_held)(scope) == 110  # 10 for the prompt, 100 for the reply
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await _poll(lambda: _held(scope) == 0, "the cancelled call released its hold")
    spent = await sync_to_async(budgets.used)(scope)
    assert 10 < spent["d"]["t"] < 110  # its prompt and what it streamed, estimated (the upstream said nothing)


async def test_a_failed_call_releases_its_reservation(fake_openai, owner, backend):
    await sync_to_async(UserBudget.objects.create)(user=owner, budget={"tokens_per_day": 1000})
    scope = _scope(owner, tokens_per_day=1000)
    provider = metered(_provider(fake_openai), Caller(owner.pk, facet="v1"))  # nothing scripted: a 500
    with pytest.raises(AppError):
        await collect(provider.stream(_request()))
    assert await sync_to_async(_held)(scope) == 0


async def test_an_admission_cancelled_while_its_database_thread_runs_gives_its_hold_back(owner, backend):
    from usage.metering import _reserve

    if backend != "database":
        pytest.skip("a Redis admission is one synchronous round trip: nothing to cancel midway")
    scope = _scope(owner, tokens_per_day=1000)
    admission = asyncio.ensure_future(_reserve([scope], 500, 0.0))
    await asyncio.sleep(0)  # it has handed the reservation to a thread and waits for it
    admission.cancel()
    with pytest.raises(asyncio.CancelledError):
        await admission
    await _poll(lambda: budgets.used(scope)["m"].get("r") == 1, "the thread finished its reservation")
    await _poll(lambda: _held(scope) == 0, "the reservation the thread took was given back")


def test_the_doors_early_check_passes_one_token_under_the_limit_and_refuses_at_it(owner, backend):
    """A door's check (chat, webhooks) reserves nothing: it refuses only when nothing is left."""
    scope = _scope(owner, tokens_per_day=10)
    budgets.settle([scope], 9, 0.0, hold=budgets.reserve([scope]))
    budgets.check([scope])
    budgets.settle([scope], 1, 0.0)
    with pytest.raises(AppError) as refused:
        budgets.check([scope])
    assert refused.value.code == "budget_exceeded" and refused.value.details["left"] == 0

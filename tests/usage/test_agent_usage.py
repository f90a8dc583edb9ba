"""Usage by agent (issue 45, item 7): a call made for a named agent (Caller.agent) is recorded with its slug on
every path (streamed and whole, budgeted or not: the Redis store on the PostgreSQL + Redis pass, else the
database's; the agent loop sets it from the agent's settings), and /api/usage groups (`group_by=agent`, no agent:
null) and filters (`?agent=<slug>`) by it, within what the caller may read (their own; an admin's everyone's)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import sync_to_async

from agentsite.agent.config import AgentSettings
from agentsite.agent.loop import run_agent
from agentsite.agent.providers import OpenAIProvider, collect
from agentsite.agent.types import ChatRequest, Message, ModelSettings
from agentsite.agent.usage import Caller, CallRecord, metered
from tests.fakes.llm import Text
from usage import budgets, buffer
from usage.models import UsageAgentDaily, UsageDaily, UsageUserDaily, UserBudget

TODAY = datetime.now(UTC).date()


@pytest.fixture
def _empty_buffer():
    buffer.flush()
    UsageDaily.objects.all().delete()
    UsageUserDaily.objects.all().delete()
    UsageAgentDaily.objects.all().delete()
    budgets.drop_user_budget(None)
    yield
    buffer.flush()


def _rows() -> list[tuple[str, str, int, int, int]]:
    """(agent, facet, requests, prompt_tokens, completion_tokens) of every aggregate row, ordered."""
    return sorted(UsageDaily.objects.values_list("agent", "facet", "requests", "prompt_tokens", "completion_tokens"))


def _provider(fake) -> OpenAIProvider:
    return OpenAIProvider(base_url=fake.base_url, api_key="sk-test", model="fake-model", timeout=10)


# --- recording: the slug flows from the Caller into the aggregate ---------------------------------------------

@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("budgeted", [False, True], ids=["no-budget", "budget-store"])
async def test_a_metered_call_for_an_agent_is_recorded_with_its_slug_streamed_and_whole(
        fake_openai, owner, _empty_buffer, budgeted):
    if budgeted:  # the call is admitted and settled against a budget (Redis, or the database without it)
        await sync_to_async(UserBudget.objects.create)(user=owner, budget={"tokens_per_day": 100_000})
    fake_openai.script(Text("one", usage=(12, 7)), Text("two", usage=(5, 3)), Text("three", usage=(1, 1)))
    for_agent = metered(_provider(fake_openai), Caller(owner.pk, "", "v1", agent="x"))
    streamed = await collect(for_agent.stream(ChatRequest([Message("user", "hi")])))
    whole = await for_agent.complete(ChatRequest([Message("user", "hi")], settings=ModelSettings(max_tokens=50)))
    assert (streamed.text, whole.text) == ("one", "two")
    await collect(metered(_provider(fake_openai), Caller(owner.pk, facet="v1")).stream(
        ChatRequest([Message("user", "hi")])))  # the plain model: no agent
    await sync_to_async(buffer.flush)()
    assert await sync_to_async(_rows)() == [("", "v1", 1, 1, 1), ("x", "v1", 2, 17, 10)]
    if budgeted:  # the budget saw all three: the agent's calls are the user's like any other
        left = await sync_to_async(budgets.remaining)(budgets.Scope(f"u:{owner.pk}", {"tokens_per_day": 100_000}))
        assert left["tokens_per_day"]["used"] == 29


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("facet", ["v1", "chat", "mcp"])
async def test_the_agent_loop_records_each_round_with_the_agents_slug(fake_openai, owner, _empty_buffer, facet):
    # A door's caller has no agent; the loop adds the one its settings are (agentsite/agent/loop.py), whichever
    # door ran it.
    settings = AgentSettings(provider="openai", base_url=fake_openai.base_url, api_key="sk-test", model="fake-model",
                             tools=(), kb_enabled=False, agent="reviewer")
    fake_openai.script(Text("looked at it", usage=(20, 4)))
    provider = _provider(fake_openai)
    events = [event async for event in run_agent(messages=[Message("user", "review")], user_id=owner.pk,
                                                 settings=settings, use_tools=False, provider=provider,
                                                 caller=Caller(owner.pk, facet=facet))]
    assert events[-1].type == "done", [event.type for event in events]
    await sync_to_async(buffer.flush)()
    assert await sync_to_async(_rows)() == [("reviewer", facet, 1, 20, 4)]
    assert fake_openai.bodies()[-1]["model"] == "fake-model"


@pytest.mark.django_db
def test_rows_of_one_key_that_differ_only_by_agent_stay_apart_across_flushes(owner, _empty_buffer):
    for agent in ("a", "b", "a", ""):
        buffer.add(CallRecord(Caller(owner.pk, facet="v1", agent=agent), "m", "m", 3, 4, 10.0, "ok", True), 0.5)
    buffer.flush()
    buffer.add(CallRecord(Caller(owner.pk, facet="v1", agent="a"), "m", "m", 1, 1, 1.0, "ok", True), 0.0)
    buffer.flush()  # adds to the row of agent "a" (the unique row includes the agent)
    assert _rows() == [("", "v1", 1, 3, 4), ("a", "v1", 3, 7, 9), ("b", "v1", 1, 3, 4)]
    [rollup] = UsageUserDaily.objects.values_list("requests", flat=True)
    assert rollup == 5
    # The per-(day, user, agent) rollup: one row per agent (none included), whatever the keys, doors and models.
    buffer.add(CallRecord(Caller(owner.pk, "k", "chat", agent="a"), "n", "n", 10, 10, 1.0, "ok", True), 0.25)
    buffer.flush()
    assert sorted(UsageAgentDaily.objects.values_list("agent", "requests", "prompt_tokens", "completion_tokens",
                                                      "cost")) == [
        ("", 1, 3, 4, 0.5), ("a", 4, 17, 19, 1.25), ("b", 1, 3, 4, 0.5)]


# --- /api/usage by agent -------------------------------------------------------------------------------------

def _call(user_id, agent="", model="m1", prompt=10, completion=5, cost=0.01, day=TODAY):
    buffer.add(CallRecord(Caller(user_id, "", "v1", agent=agent), model, model, prompt, completion, 50.0, "ok", True),
               cost, day=day.isoformat())


@pytest.fixture
def recorded(db, owner, other_user, _empty_buffer):
    _call(owner.pk, "support", prompt=10, completion=5)
    _call(owner.pk, "support", prompt=20, completion=10, day=TODAY - timedelta(days=1))
    _call(owner.pk, "reviewer", prompt=1, completion=1)
    _call(owner.pk, "", prompt=100, completion=0)  # a plain model
    _call(other_user.pk, "support", prompt=1000, completion=500)
    _call(other_user.pk, "", prompt=7, completion=0)
    buffer.flush()


def _by_agent(client, **query) -> dict:
    answer = client.get("/api/usage", {"group_by": "agent", **query})
    assert answer.status_code == 200, answer.content
    return answer.json()


def test_a_user_reads_their_own_usage_by_agent_with_no_agent_as_null(owner_client, recorded):
    body = _by_agent(owner_client)
    assert {row["agent"]: (row["requests"], row["total_tokens"]) for row in body["results"]} == {
        None: (1, 100), "reviewer": (1, 2), "support": (2, 45)}  # never the other user's 1500 for support
    assert body["totals"]["requests"] == 4 and body["totals"]["total_tokens"] == 147


def test_an_admin_reads_everyones_usage_by_agent_or_one_users(admin_client, recorded, other_user):
    everyone = {row["agent"]: row["total_tokens"] for row in _by_agent(admin_client)["results"]}
    assert everyone == {None: 107, "reviewer": 2, "support": 1545}
    theirs = {row["agent"]: row["total_tokens"] for row in _by_agent(admin_client, user=other_user.pk)["results"]}
    assert theirs == {None: 7, "support": 1500}
    by_user = admin_client.get("/api/usage", {"group_by": "user,agent"}).json()["results"]
    assert sorted((row["username"], row["agent"] or "", row["requests"]) for row in by_user) == [
        ("other", "", 1), ("other", "support", 1), ("owner", "", 1), ("owner", "reviewer", 1), ("owner", "support", 2)]


def test_the_agent_rollup_and_the_rows_give_the_same_answers(admin_client, recorded):
    # group_by=agent alone reads the rollup; with the facet the rows: the same totals per agent.
    rollup = _by_agent(admin_client)
    rows = admin_client.get("/api/usage", {"group_by": "agent,facet"}).json()
    assert rollup["totals"] == rows["totals"] and rollup["totals"]["requests"] == 6
    assert {row["agent"]: row["total_tokens"] for row in rollup["results"]} == {
        row["agent"]: row["total_tokens"] for row in rows["results"]}
    one = admin_client.get("/api/usage", {"group_by": "facet", "agent": "support"}).json()
    assert one["totals"] == admin_client.get("/api/usage", {"group_by": "day", "agent": "support"}).json()["totals"]


def test_the_agent_filter_keeps_that_agents_calls_within_what_the_caller_may_read(owner_client, admin_client,
                                                                                   recorded, other_user):
    # group_by=day alone reads the per-user rollup, which has no agent: with ?agent the rows are read instead.
    mine = owner_client.get("/api/usage", {"group_by": "day", "agent": "support"}).json()
    assert [(row["day"], row["total_tokens"]) for row in mine["results"]] == [
        ((TODAY - timedelta(days=1)).isoformat(), 30), (TODAY.isoformat(), 15)]
    assert mine["totals"]["requests"] == 2
    assert _by_agent(admin_client, agent="support")["totals"]["total_tokens"] == 1545
    assert admin_client.get("/api/usage", {"group_by": "user", "agent": "support"}).json()["totals"][
        "total_tokens"] == 1545
    assert _by_agent(owner_client, agent="nobody-called-it")["results"] == []
    refused = owner_client.get("/api/usage", {"agent": "support", "user": other_user.pk})
    assert refused.status_code == 404  # the filter opens nothing: another user's usage stays the admin's


@pytest.mark.parametrize("agent", ["", "Support", "agent:support", "a" * 65, "sup port", "support\n"])
def test_an_agent_filter_that_is_not_a_slug_is_a_400_naming_it(owner_client, agent):
    answer = owner_client.get("/api/usage", {"agent": agent})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "invalid" and list(error["details"]) == ["agent"]


def test_group_by_agent_counts_as_one_of_the_two_groups(owner_client):
    answer = owner_client.get("/api/usage", {"group_by": "day,model,agent"})
    assert answer.status_code == 400 and "agent" in answer.json()["error"]["message"]

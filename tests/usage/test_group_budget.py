"""A user group's budget (issue 44, item 4): it binds every member's calls, counted together, beside each
member's own and their key's; a non-member is not bound by it, and a member removed is free of it on their next
call. Admins set it; members read it with what the members used; /api/usage?group= totals the current members.

The calls are real /v1/chat/completions requests through the Django test client, to the fake upstream over HTTP
(each answers 12 + 7 tokens; a request of "hi" with max_tokens 7 reserves 1 + 7 = 8). The counters run in the
database (SQLite, or PostgreSQL on the CI's second pass) and, when REDIS_URL is set, in Redis.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.models import AuditEvent
from agentsite.agent.usage import Caller, CallRecord
from agentsite.core import invalidation
from agentsite.core.errors import AppError
from organisation import services as org
from organisation.models import MANAGER
from tests.conftest import client_for
from tests.fakes.llm import Text
from usage import budgets, buffer
from usage.models import UsageDaily, UsageUserDaily

pytestmark = pytest.mark.django_db(transaction=True)

ANSWER = (12, 7)  # what the fake upstream counts for each call: 19 tokens
WORST = 8  # what each call reserves: "hi" (1 token) + max_tokens 7


@pytest.fixture(params=["database", *(["redis"] if os.environ.get("REDIS_URL") else [])])
def backend(request, settings):
    """The budget counters in the database, then (on the PostgreSQL + Redis pass) in Redis."""
    if request.param == "database":
        settings.REDIS_URL = ""
    budgets.drop_group_budgets(None)
    yield request.param
    budgets.drop_group_budgets(None)
    buffer.flush()


@pytest.fixture
def upstream(admin_client, fake_openai, settings):
    settings.AGENTSITE_ALLOW_PRIVATE_FETCH = True  # the fake listens on loopback
    answer = admin_client.patch("/api/config", {"provider": "openai", "base_url": fake_openai.base_url,
                                                "api_key": "sk-upstream", "model": "fake-model"}, format="json")
    assert answer.status_code == 200, answer.content
    fake_openai.script(*[Text("fine", usage=ANSWER) for _ in range(20)])
    return fake_openai


@pytest.fixture
def team(django_user_model, admin):
    """A group of three (`ann` its manager, `bob`, `cat`) and `dan`, in no group."""
    people = {name: django_user_model.objects.create_user(name, password="x-correct-horse-1")
              for name in ("ann", "bob", "cat", "dan")}
    group = org.group_create(name="team")
    org.member_add(group=group, user_id=people["ann"].pk, role=MANAGER)
    for name in ("bob", "cat"):
        org.member_add(group=group, user_id=people[name].pk)
    people["group"] = group
    return people


def _budget(admin_client, group, **limits) -> dict:
    answer = admin_client.put(f"/api/groups/{group.pk}/budget", limits, format="json")
    assert answer.status_code == 200, answer.content
    return answer.json()


def _call(user, stream: bool = False):
    return client_for(user).post("/v1/chat/completions", {
        "model": "fake-model", "max_tokens": 7, "stream": stream, "messages": [{"role": "user", "content": "hi"}]},
        format="json")


def _ok(user) -> None:
    answer = _call(user)
    assert answer.status_code == 200, answer.content
    assert answer.json()["choices"][0]["message"]["content"] == "fine"


def _refused(user, stream: bool = False) -> dict:
    answer = _call(user, stream)
    assert answer.status_code == 429, answer.content
    error = answer.json()["error"]
    assert (error["code"], error["type"]) == ("budget_exceeded", "rate_limit_error")
    assert 0 < int(answer["Retry-After"]) <= 86400
    return error


def test_two_members_spend_the_groups_budget_and_the_thirds_next_call_is_refused(
        backend, upstream, team, admin_client):
    _budget(admin_client, team["group"], tokens_per_day=2 * sum(ANSWER))  # 38
    _ok(team["ann"])
    _ok(team["bob"])  # 38 used: nothing left
    error = _refused(team["cat"])
    assert "team" in error["message"] and "tokens_per_day" in error["message"]
    assert "team" in _refused(team["cat"], stream=True)["message"]  # a stream: refused before it starts
    assert len(upstream.bodies()) == 2  # refused before the upstream was asked
    _ok(team["dan"])  # not a member: not bound by it
    left = client_for(team["cat"]).get(f"/api/groups/{team['group'].pk}/budget").json()["left"]["tokens_per_day"]
    assert (left["limit"], left["used"], left["remaining"]) == (38, 38, 0)
    [mine] = client_for(team["cat"]).get("/api/budget").json()["groups"]
    assert (mine["id"], mine["name"], mine["left"]["tokens_per_day"]["used"]) == (team["group"].pk, "team", 38)
    assert client_for(team["dan"]).get("/api/budget").json()["groups"] == []


@pytest.mark.parametrize(("limit", "passes"), [(2 * sum(ANSWER) + WORST, True), (2 * sum(ANSWER) + WORST - 1, False)])
def test_the_thirds_worst_case_of_exactly_what_is_left_passes_and_one_more_is_refused(
        backend, upstream, team, admin_client, limit, passes):
    _budget(admin_client, team["group"], tokens_per_day=limit)
    _ok(team["ann"])
    _ok(team["bob"])  # 38 used: 8 left, or 7
    if passes:
        _ok(team["cat"])
        _refused(team["cat"])  # 57 used: past the limit, nothing left
    else:
        answer = _call(team["cat"])
        assert answer.status_code == 429, answer.content
        assert answer.json()["error"]["code"] == "budget_exceeded"
        assert len(upstream.bodies()) == 2


def test_a_member_removed_is_free_of_the_groups_budget_on_their_next_call(backend, upstream, team, admin_client):
    _budget(admin_client, team["group"], tokens_per_day=sum(ANSWER))
    _ok(team["bob"])
    _refused(team["cat"])
    removed = client_for(team["ann"]).delete(f"/api/groups/{team['group'].pk}/members/{team['cat'].pk}")
    assert removed.status_code == 204
    _ok(team["cat"])
    _refused(team["bob"])  # still a member, still bound


def test_the_users_own_budget_and_the_groups_both_bind(backend, upstream, team, admin_client, one_minute):
    _budget(admin_client, team["group"], requests_per_minute=3)
    answer = admin_client.put(f"/api/users/{team['bob'].pk}/budget", {"requests_per_minute": 1}, format="json")
    assert answer.status_code == 200
    _ok(team["bob"])
    refused = _call(team["bob"])  # bob's own limit
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited"
    assert "group" not in refused.json()["error"]["message"]
    _ok(team["ann"])
    _ok(team["cat"])  # the group's third request this minute
    refused = _call(team["ann"])  # the group's limit
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited"
    assert "group team" in refused.json()["error"]["message"]


def test_a_group_without_a_budget_binds_nothing_and_a_budget_set_later_counts_from_then(
        backend, upstream, team, admin_client):
    _ok(team["ann"])
    _ok(team["bob"])
    _budget(admin_client, team["group"], tokens_per_day=sum(ANSWER))
    _ok(team["cat"])  # the calls before the budget were not counted
    _refused(team["ann"])


def test_the_groups_budget_costs_no_query_per_call_once_read(backend, team, admin_client):
    assert budgets.group_scopes_load(team["bob"].pk) == ()  # no group has a budget: nobody's groups are asked
    with CaptureQueriesContext(connection) as queries:
        assert budgets.group_scopes_peek(team["ann"].pk) == ()
    assert len(queries) == 0
    _budget(admin_client, team["group"], tokens_per_day=100)
    assert budgets.group_scopes_peek(team["ann"].pk) is None  # a budget set: dropped at once
    user = team["bob"].pk
    [scope] = budgets.group_scopes_load(user)
    assert (scope.name, scope.limits, scope.label) == (f"g:{team['group'].pk}", {"tokens_per_day": 100}, "team")
    with CaptureQueriesContext(connection) as queries:
        peeked = budgets.group_scopes_peek(user)
    assert len(queries) == 0
    # Cached only where every membership change is announced (not on PostgreSQL without Redis: each call reads).
    assert peeked == ((scope,) if invalidation.connected() else None)
    org.member_remove(group=team["group"], user_id=str(user))
    assert budgets.group_scopes_peek(user) is None  # dropped at once
    assert budgets.group_scopes_load(user) == ()
    assert budgets.group_scopes_load(team["dan"].pk) == ()


# --- the endpoints -----------------------------------------------------------------------------------------


def test_admins_set_a_groups_budget_members_read_it_and_others_get_404(team, admin_client):
    path = f"/api/groups/{team['group'].pk}/budget"
    empty = client_for(team["bob"]).get(path)
    assert empty.status_code == 200 and set(empty.json()["budget"].values()) == {None}
    assert client_for(team["ann"]).put(path, {"tokens_per_day": 5}, format="json").status_code == 403  # a manager
    assert client_for(team["bob"]).put(path, {"tokens_per_day": 5}, format="json").status_code == 403
    assert client_for(team["dan"]).get(path).status_code == 404
    assert client_for(team["dan"]).put(path, {"tokens_per_day": 5}, format="json").status_code == 404
    assert admin_client.get("/api/groups/999999/budget").status_code == 404
    set_ = _budget(admin_client, team["group"], tokens_per_day=500, cost_per_month=2.5)
    assert set_["budget"] == {"requests_per_minute": None, "tokens_per_minute": None, "tokens_per_day": 500,
                              "cost_per_day": None, "tokens_per_month": None, "cost_per_month": 2.5}
    assert set_["left"]["tokens_per_day"]["remaining"] == 500
    read = client_for(team["ann"]).get(path).json()
    assert read["budget"] == set_["budget"] and read["left"]["cost_per_month"]["limit"] == 2.5
    bad = admin_client.put(path, {"tokens_per_day": -1}, format="json")
    assert bad.status_code == 400 and "tokens_per_day" in bad.json()["error"]["details"]
    assert admin_client.put(path, {"colour": 1}, format="json").status_code == 400


def test_a_budget_change_is_audited_with_before_and_after(team, admin_client, admin):
    _budget(admin_client, team["group"], tokens_per_day=500)
    _budget(admin_client, team["group"], requests_per_minute=10)
    first, second = AuditEvent.objects.filter(action="budget.change").order_by("id")
    assert (second.target, second.actor_id) == (f"group:{team['group'].pk}", admin.pk)
    assert first.details["before"]["tokens_per_day"] is None and first.details["after"]["tokens_per_day"] == 500
    assert second.details["before"]["tokens_per_day"] == 500
    assert (second.details["after"]["tokens_per_day"], second.details["after"]["requests_per_minute"]) == (None, 10)


@pytest.fixture
def recorded(team):
    buffer.flush()
    UsageDaily.objects.all().delete()
    UsageUserDaily.objects.all().delete()
    for name, tokens in (("ann", 10), ("bob", 20), ("cat", 40), ("dan", 80)):
        buffer.add(CallRecord(Caller(team[name].pk, facet="v1"), "m", "m", tokens, 1, 5.0, "ok", True), 0.5,
                   day=datetime.now(UTC).date().isoformat())
    buffer.flush()
    return team


def test_a_groups_usage_is_its_current_members_total_for_admins_and_its_managers(recorded, admin_client):
    team = recorded
    group = team["group"].pk
    for client in (admin_client, client_for(team["ann"])):
        totals = client.get("/api/usage", {"group": group}).json()["totals"]
        assert totals == {"requests": 3, "prompt_tokens": 70, "completion_tokens": 3, "total_tokens": 73,
                          "cost": 1.5}
    by_user = admin_client.get("/api/usage", {"group": group, "group_by": "user,model"}).json()["results"]
    assert {row["username"]: row["prompt_tokens"] for row in by_user} == {"ann": 10, "bob": 20, "cat": 40}
    org.member_remove(group=team["group"], user_id=str(team["cat"].pk))  # a former member's usage is not the group's
    assert admin_client.get("/api/usage", {"group": group}).json()["totals"]["prompt_tokens"] == 30
    refused = client_for(team["bob"]).get("/api/usage", {"group": group})  # a member, not a manager
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert client_for(team["dan"]).get("/api/usage", {"group": group}).status_code == 404
    assert admin_client.get("/api/usage", {"group": 999999}).status_code == 404
    for query in ({"group": "x"}, {"group": group, "user": team["ann"].pk}):
        answer = admin_client.get("/api/usage", query)
        assert answer.status_code == 400 and "group" in answer.json()["error"]["details"]


def test_a_groups_refusal_names_the_group(backend, team):
    group = team["group"]
    scope = budgets.Scope(f"g:{group.pk}", {"tokens_per_day": 10}, "team")
    with pytest.raises(AppError) as refused:
        budgets.reserve([scope], tokens=11)
    assert refused.value.details["group"] == group.pk and refused.value.details["left"] == 10
    assert refused.value.message.startswith("Your group team's budget tokens_per_day has 10 left")
    user = budgets.Scope(f"u:{team['ann'].pk}", {"tokens_per_day": 10})
    with pytest.raises(AppError) as refused:
        budgets.reserve([user], tokens=11)
    assert "group" not in refused.value.details

"""/api/usage, /api/budget, /api/users and the price table (issue 27, items 3-4): own usage for users,
everyone's for admins, grouped as asked, from the aggregates the flusher wrote; admins set budgets and flags."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agentsite.agent.usage import Caller, CallRecord
from usage import buffer
from usage.models import UsageDaily, UsageUserDaily

pytestmark = pytest.mark.django_db

TODAY = datetime.now(UTC).date()


def _call(user_id, model="m1", facet="v1", key="", prompt=10, completion=5, cost=0.01, day=TODAY):
    buffer.add(CallRecord(Caller(user_id, key, facet), model, model, prompt, completion, 50.0, "ok", True), cost,
               day=day.isoformat())


@pytest.fixture
def recorded(owner, other_user):
    buffer.flush()
    UsageDaily.objects.all().delete()
    UsageUserDaily.objects.all().delete()
    _call(owner.pk, "m1")
    _call(owner.pk, "m2", facet="chat")
    _call(owner.pk, "m1", day=TODAY - timedelta(days=1))
    _call(other_user.pk, "m1", prompt=100, completion=50)
    buffer.flush()


def test_a_user_reads_their_own_usage_by_day_and_model(owner_client, recorded):
    answer = owner_client.get("/api/usage", {"group_by": "day,model"})
    assert answer.status_code == 200
    body = answer.json()
    assert body["totals"] == {"requests": 3, "prompt_tokens": 30, "completion_tokens": 15, "total_tokens": 45,
                              "cost": 0.03}
    assert [(row["day"], row["model"], row["requests"]) for row in body["results"]] == [
        ((TODAY - timedelta(days=1)).isoformat(), "m1", 1), (TODAY.isoformat(), "m1", 1), (TODAY.isoformat(), "m2", 1)]
    by_facet = owner_client.get("/api/usage", {"group_by": "facet"}).json()["results"]
    assert {row["facet"]: row["total_tokens"] for row in by_facet} == {"chat": 15, "v1": 30}


def test_the_range_is_inclusive_and_the_rollup_agrees_with_the_rows(owner_client, admin_client, recorded, owner):
    today = owner_client.get("/api/usage", {"from": TODAY.isoformat(), "to": TODAY.isoformat()}).json()
    assert today["totals"]["requests"] == 2
    everyone = admin_client.get("/api/usage", {"group_by": "user"}).json()
    assert {row["username"]: row["total_tokens"] for row in everyone["results"]} == {"owner": 45, "other": 150}
    by_model = admin_client.get("/api/usage", {"group_by": "model"}).json()
    assert by_model["totals"] == everyone["totals"]  # the rollup (user, day) and the rows (model) add up the same


def test_another_users_usage_is_for_admins_only(owner_client, admin_client, recorded, other_user):
    refused = owner_client.get("/api/usage", {"user": other_user.pk})
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found"
    assert owner_client.get("/api/usage", {"user": 10**15}).status_code == 404  # nobody: the same answer
    assert admin_client.get("/api/usage", {"user": other_user.pk}).json()["totals"]["total_tokens"] == 150


@pytest.mark.parametrize("query", [{"group_by": "colour"}, {"group_by": "day,day"}, {"group_by": "day,model,key"},
                                   {"from": "yesterday"}, {"from": "2026-02-01", "to": "2026-01-01"}, {"user": "x"}])
def test_a_bad_query_is_a_400_naming_it(owner_client, query):
    answer = owner_client.get("/api/usage", query)
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid"
    assert set(answer.json()["error"]["details"]) & {"group_by", "from", "to", "user"}


def test_an_admin_sets_a_users_budget_and_the_user_sees_what_is_left(admin_client, owner_client, owner):
    assert owner_client.put(f"/api/users/{owner.pk}/budget", {"tokens_per_day": 5}, format="json").status_code == 403
    answer = admin_client.put(f"/api/users/{owner.pk}/budget", {"tokens_per_day": 50000, "cost_per_month": 2.5},
                              format="json")
    assert answer.status_code == 200
    assert answer.json() == {"requests_per_minute": None, "tokens_per_minute": None, "tokens_per_day": 50000,
                             "cost_per_day": None, "tokens_per_month": None, "cost_per_month": 2.5}
    assert admin_client.get(f"/api/users/{owner.pk}/budget").json()["tokens_per_day"] == 50000
    left = owner_client.get("/api/budget").json()
    assert left["user"]["tokens_per_day"]["limit"] == 50000 and left["user"]["tokens_per_day"]["remaining"] == 50000
    assert left["key"] is None
    bad = admin_client.put(f"/api/users/{owner.pk}/budget", {"tokens_per_day": -1, "colour": 1}, format="json")
    assert bad.status_code == 400
    assert admin_client.get("/api/users/999999/budget").status_code == 404


def test_admins_list_users_with_their_month_and_change_flags(admin_client, owner_client, recorded, owner, admin):
    assert owner_client.get("/api/users").status_code == 403
    rows = {row["username"]: row for row in admin_client.get("/api/users").json()["results"]}
    assert rows["owner"]["month_tokens"] == (45 if TODAY.day > 1 else 30) and rows["owner"]["is_active"] is True
    assert set(rows["owner"]["budget"]) == {"tokens_per_day", "tokens_per_month", "cost_per_day", "cost_per_month",
                                            "requests_per_minute", "tokens_per_minute"}
    answer = admin_client.patch(f"/api/users/{owner.pk}", {"is_active": False, "is_admin": True}, format="json")
    assert answer.status_code == 200 and (answer.json()["is_active"], answer.json()["is_admin"]) == (False, True)
    owner.refresh_from_db()
    assert (owner.is_active, owner.is_staff) == (False, True)
    assert admin_client.patch(f"/api/users/{admin.pk}", {"is_admin": False}, format="json").status_code == 409


def test_the_price_table_is_read_by_anyone_and_set_by_admins(admin_client, owner_client):
    prices = {"prices": [{"model": "gpt-4o", "input_per_million": 2.5, "output_per_million": 10}]}
    assert owner_client.put("/api/usage/prices", prices, format="json").status_code == 403
    assert admin_client.put("/api/usage/prices", prices, format="json").status_code == 200
    assert owner_client.get("/api/usage/prices").json() == {"prices": [
        {"model": "gpt-4o", "input_per_million": 2.5, "output_per_million": 10.0}]}
    twice = {"prices": prices["prices"] * 2}
    assert admin_client.put("/api/usage/prices", twice, format="json").status_code == 400


def test_the_user_list_takes_a_blank_search_as_none_as_its_schema_says(admin_client, owner, other_user):
    everyone = {row["username"] for row in admin_client.get("/api/users").json()["results"]}
    blank = admin_client.get("/api/users", {"search": ""})
    assert blank.status_code == 200
    assert {row["username"] for row in blank.json()["results"]} == everyone == {"root", "owner", "other"}
    assert [row["username"] for row in admin_client.get("/api/users", {"search": "oth"}).json()["results"]] == ["other"]
    schema = admin_client.get("/api/schema?format=json").json()
    search = next(parameter for parameter in schema["paths"]["/api/users"]["get"]["parameters"]
                  if parameter["name"] == "search")
    assert "minLength" not in search["schema"] and search["schema"]["maxLength"] == 150

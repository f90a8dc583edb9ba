"""Reading usage: the aggregates grouped for /api/usage, a user's month, the budgets and what is left of them."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet, Sum

from accounts.models import ApiKey
from organisation.models import Membership
from usage import budgets
from usage.models import GroupBudget, ModelPrice, UsageAgentDaily, UsageDaily, UsageUserDaily, UserBudget

GROUPS = {"day": "day", "model": "model_answered", "key": "key_id", "facet": "facet", "user": "user_id",
          "agent": "agent"}
ROLLUP_GROUPS = {"day", "user"}
AGENT_ROLLUP_GROUPS = {"day", "user", "agent"}
SUMS = ("requests", "prompt_tokens", "completion_tokens", "cost")


def _of_users(rows: QuerySet, user_id: int | None, group_id: int | None) -> QuerySet:
    if user_id is not None:
        rows = rows.filter(user_id=user_id)
    if group_id is not None:  # the group's current members (one subquery)
        rows = rows.filter(user_id__in=Membership.objects.filter(group_id=group_id).values("user_id"))
    return rows


def _aggregates(groups: set[str], by_agent: bool) -> QuerySet:
    """The smallest aggregate that answers: day and user alone read the per-(day, user) rollup; with the agent
    (grouped or filtered) the per-(day, user, agent) one; any other group the rows."""
    if not by_agent and groups <= ROLLUP_GROUPS:
        return UsageUserDaily.objects.all()
    if groups <= AGENT_ROLLUP_GROUPS:
        return UsageAgentDaily.objects.all()
    return UsageDaily.objects.all()


def _totals(values: dict[str, Any]) -> dict[str, Any]:
    prompt, completion = int(values.get("prompt_tokens") or 0), int(values.get("completion_tokens") or 0)
    return {"requests": int(values.get("requests") or 0), "prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion, "cost": round(float(values.get("cost") or 0.0), 6)}


def usage_report(*, start: date, end: date, user_id: int | None, group_by: list[str],
                 group_id: int | None = None, agent: str | None = None) -> dict[str, Any]:
    """`{results: [{<group>..., requests, prompt_tokens, completion_tokens, total_tokens, cost}], totals}`, one
    result per combination of the groups (one GROUP BY over the indexed aggregates); `group_id`: only the usage
    of that user group's current members (all of it in the range, also from before they joined); `agent`: only
    the calls made for the named agent of that slug. Grouped by agent, calls made for no agent are the result
    whose `agent` is null."""
    rows = _aggregates(set(group_by), agent is not None).filter(day__gte=start, day__lte=end)
    if agent is not None:
        rows = rows.filter(agent=agent)
    rows = _of_users(rows, user_id, group_id)
    columns = [GROUPS[group] for group in group_by]
    grouped = rows.values(*columns).annotate(**{name: Sum(name) for name in SUMS}).order_by(*columns)
    results = []
    sums: dict[str, Any] = dict.fromkeys(SUMS, 0)
    for values in grouped:
        result: dict[str, Any] = {}
        for group, column in zip(group_by, columns, strict=True):
            value = values[column]
            result[group] = value.isoformat() if isinstance(value, date) else value
        results.append({**result, **_totals(values)})
        for name in SUMS:
            sums[name] += values[name] or 0
    _name_groups(results, group_by)
    # The totals are the results' sum, from the one query: a second query could see a flush the first did not
    # (totals of 3 calls beside no result rows, as a loaded CI run saw).
    return {"results": results, "totals": _totals(sums)}


def _name_groups(results: list[dict[str, Any]], group_by: list[str]) -> None:
    """Names beside the ids: `username` for a user, `key_name` for a key (None: none, or since deleted); no
    agent (a plain model's calls) is null, as no user and no key are."""
    if "user" in group_by:
        ids = {result["user"] for result in results}
        names = dict(get_user_model().objects.filter(pk__in=ids).values_list("pk", "username"))
        for result in results:
            result["username"] = names.get(result["user"])
            result["user"] = result["user"] or None
    if "key" in group_by:
        names = _key_names({result["key"] for result in results if result["key"]})
        for result in results:
            result["key_name"] = names.get(result["key"])
            result["key"] = result["key"] or None
    if "agent" in group_by:
        for result in results:
            result["agent"] = result["agent"] or None


def _key_names(ids: set[str]) -> dict[str, str]:
    """The API keys' names (a deleted key's usage stays, nameless)."""
    valid = [int(key) for key in ids if key.isdigit()]
    return {str(pk): name for pk, name in ApiKey.objects.filter(pk__in=valid).values_list("pk", "name")}


def month_totals(user_ids: list[int]) -> dict[int, dict[str, Any]]:
    """Each user's tokens and cost this month (UTC), as flushed."""
    today = datetime.now(UTC).date()
    rows = (UsageUserDaily.objects.filter(day__gte=today.replace(day=1), user_id__in=user_ids).values("user_id")
            .annotate(prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens"), cost=Sum("cost")))
    return {row["user_id"]: {"tokens": int((row["prompt"] or 0) + (row["completion"] or 0)),
                             "cost": round(float(row["cost"] or 0.0), 6)} for row in rows}


def user_list(search: str = "") -> QuerySet:
    users = get_user_model().objects.order_by("username")
    return users.filter(Q(username__icontains=search)) if search else users


def user_budgets(user_ids: list[int]) -> dict[int, dict[str, Any]]:
    return dict(UserBudget.objects.filter(pk__in=user_ids).values_list("pk", "budget"))


def budget_of(user_id: int) -> dict[str, Any]:
    """The user's budget with every limit named (null: no limit)."""
    stored = UserBudget.objects.filter(pk=user_id).values_list("budget", flat=True).first() or {}
    return {limit: stored.get(limit) for limit in budgets.LIMITS}


def group_budget_of(group_id: int) -> dict[str, Any]:
    """The group's budget with every limit named (null: no limit)."""
    stored = GroupBudget.objects.filter(pk=group_id).values_list("budget", flat=True).first() or {}
    return {limit: stored.get(limit) for limit in budgets.LIMITS}


def group_budget_left(group_id: int) -> dict[str, Any]:
    """`{budget, left: {<limit>: {limit, used, remaining, resets_at}}}`: the group's limits and what its members
    together used of each in the current windows (counted since the budget was set)."""
    budget = group_budget_of(group_id)
    return {"budget": budget,
            "left": budgets.remaining(budgets.Scope(f"g:{group_id}", budgets.clean_budget(budget)))}


def budget_left(*, user_id: int, key_id: str = "", key_budget: dict[str, Any] | None = None) -> dict[str, Any]:
    """The caller's own limits and what is left of each: `{user: {<limit>: {limit, used, remaining,
    resets_at}}, key: {...} | null, groups: [{id, name, left: {...}}]}` (a key's part only when the request was
    made with a key; `groups`: the user's groups that have a budget)."""
    windows = budgets.Windows.at()
    user_scope = budgets.Scope(f"u:{user_id}", budgets.clean_budget(budget_of(user_id)))
    out: dict[str, Any] = {"user": budgets.remaining(user_scope, windows), "key": None, "groups": [
        {"id": int(scope.name[2:]), "name": scope.label, "left": budgets.remaining(scope, windows)}
        for scope in budgets.group_scopes_load(user_id)]}
    if key_id:
        key_scope = budgets.Scope(f"k:{key_id}", budgets.clean_budget(key_budget))
        out["key"] = budgets.remaining(key_scope, windows)
    return out


def price_list() -> QuerySet[ModelPrice]:
    return ModelPrice.objects.order_by("model")

"""Reading usage: the aggregates grouped for /api/usage, a user's month, the budgets and what is left of them."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet, Sum

from accounts.models import ApiKey
from usage import budgets
from usage.models import ModelPrice, UsageDaily, UsageUserDaily, UserBudget

GROUPS = {"day": "day", "model": "model_answered", "key": "key_id", "facet": "facet", "user": "user_id"}
ROLLUP_GROUPS = {"day", "user"}
SUMS = ("requests", "prompt_tokens", "completion_tokens", "cost")


def usage_rows(*, start: date, end: date, user_id: int | None) -> QuerySet[UsageDaily]:
    """The aggregate rows of the days start..end (inclusive), of one user or (None) everyone's."""
    rows = UsageDaily.objects.filter(day__gte=start, day__lte=end)
    return rows if user_id is None else rows.filter(user_id=user_id)


def _totals(values: dict[str, Any]) -> dict[str, Any]:
    prompt, completion = int(values.get("prompt_tokens") or 0), int(values.get("completion_tokens") or 0)
    return {"requests": int(values.get("requests") or 0), "prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion, "cost": round(float(values.get("cost") or 0.0), 6)}


def usage_report(*, start: date, end: date, user_id: int | None, group_by: list[str]) -> dict[str, Any]:
    """`{results: [{<group>..., requests, prompt_tokens, completion_tokens, total_tokens, cost}], totals}`, one
    result per combination of the groups (one GROUP BY over the indexed aggregates)."""
    rows: QuerySet = usage_rows(start=start, end=end, user_id=user_id)
    if set(group_by) <= ROLLUP_GROUPS:  # day and user only: the rollup has a row per user and day
        rows = UsageUserDaily.objects.filter(day__gte=start, day__lte=end)
        rows = rows if user_id is None else rows.filter(user_id=user_id)
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
    """Names beside the ids: `username` for a user, `key_name` for a key (None: none, or since deleted)."""
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


def budget_left(*, user_id: int, key_id: str = "", key_budget: dict[str, Any] | None = None) -> dict[str, Any]:
    """The caller's own limits and what is left of each: `{user: {<limit>: {limit, used, remaining,
    resets_at}}, key: {...} | null}` (a key's part only when the request was made with a key)."""
    windows = budgets.Windows.at()
    user_scope = budgets.Scope(f"u:{user_id}", budgets.clean_budget(budget_of(user_id)))
    out: dict[str, Any] = {"user": budgets.remaining(user_scope, windows), "key": None}
    if key_id:
        key_scope = budgets.Scope(f"k:{key_id}", budgets.clean_budget(key_budget))
        out["key"] = budgets.remaining(key_scope, windows)
    return out


def price_list() -> QuerySet[ModelPrice]:
    return ModelPrice.objects.order_by("model")

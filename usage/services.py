"""Changing what usage depends on: a user's or a group's budget, account flags, the price table."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import transaction

from agentsite.core.audit import audit
from agentsite.core.errors import AppError
from usage import budgets, selectors
from usage.metering import changed_prices
from usage.models import GroupBudget, ModelPrice, UserBudget

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser


def budget_set(*, user_id: int, budget: dict[str, Any]) -> dict[str, Any]:
    """Replace the user's budget (null or absent limits: none); every process sees it at once (announced)."""
    stored = {limit: budget.get(limit) for limit in budgets.LIMITS if budget.get(limit) is not None}
    UserBudget.objects.update_or_create(user_id=user_id, defaults={"budget": stored})
    budgets.drop_user_budget(str(user_id))
    transaction.on_commit(lambda: budgets.user_budget_changed(user_id))
    return {limit: stored.get(limit) for limit in budgets.LIMITS}


def group_budget_set(*, group_id: int, budget: dict[str, Any], request: Any = None) -> dict[str, Any]:
    """Replace the group's budget (null or absent limits: none), audited `budget.change` on `group:<id>` with the
    before and after; every process sees it at once (announced). Its counters are kept: what the members used
    in the current windows still counts against the new limits."""
    stored = {limit: budget.get(limit) for limit in budgets.LIMITS if budget.get(limit) is not None}
    with transaction.atomic():
        before = selectors.group_budget_of(group_id)
        GroupBudget.objects.update_or_create(group_id=group_id, defaults={"budget": stored})
        transaction.on_commit(budgets.group_budget_changed)  # dropped here too, once committed
    after = {limit: stored.get(limit) for limit in budgets.LIMITS}
    audit("budget.change", request=request, target=f"group:{group_id}", details={"before": before, "after": after})
    return after


def user_update(*, actor: AbstractBaseUser, user: AbstractBaseUser, changes: dict[str, bool]) -> AbstractBaseUser:
    """Set `is_active` and `is_admin` (is_staff). An admin cannot lock themselves out (409 `conflict`)."""
    if user.pk == actor.pk and (changes.get("is_active") is False or changes.get("is_admin") is False):
        raise AppError("conflict", "You cannot deactivate yourself or take away your own admin rights; ask "
                       "another admin.", 409)
    if "is_active" in changes:
        user.is_active = changes["is_active"]
    if "is_admin" in changes:
        user.is_staff = changes["is_admin"]  # type: ignore[attr-defined]
    user.save(update_fields=["is_active", "is_staff"])  # accounts announces the change: tokens stop at once
    return user


def prices_set(*, prices: list[dict[str, Any]]) -> list[ModelPrice]:
    """Replace the price table."""
    models = [price["model"] for price in prices]
    if len(set(models)) != len(models):
        raise AppError("invalid", "Each model may have one price only.", 400, {"prices": ["A model is listed twice."]})
    with transaction.atomic():
        ModelPrice.objects.exclude(model__in=models).delete()
        for price in prices:
            ModelPrice.objects.update_or_create(model=price["model"], defaults={
                "input_per_million": price["input_per_million"], "output_per_million": price["output_per_million"]})
    transaction.on_commit(changed_prices)
    return list(ModelPrice.objects.order_by("model"))

"""Thin views for /api/usage, /api/budget, /api/users (admin) and /api/usage/prices."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.api import IsAdmin
from agentsite.agent.agents import SLUG_PATTERN as SLUG
from agentsite.core.audit import audit
from agentsite.core.errors import AppError
from agentsite.core.validation import query_text, validated
from organisation.selectors import group_get_for, manages
from usage import budgets, removal, selectors, services

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

MAX_RANGE_DAYS = 3660

# --- serializers ------------------------------------------------------------------------------------


def _limit_field(name: str) -> serializers.Field:
    if name in budgets.INTEGER_LIMITS:
        return serializers.IntegerField(min_value=0, allow_null=True, required=False)
    return serializers.FloatField(min_value=0, allow_null=True, required=False)


BudgetSerializer = type("BudgetSerializer", (serializers.Serializer,),
                        {name: _limit_field(name) for name in budgets.LIMITS})

class LeftSerializer(serializers.Serializer):
    limit = serializers.FloatField(allow_null=True)
    used = serializers.FloatField()
    remaining = serializers.FloatField(allow_null=True)
    resets_at = serializers.DateTimeField()


class UserRowSerializer(serializers.Serializer):
    id = serializers.CharField(source="pk")
    username = serializers.CharField()
    is_admin = serializers.BooleanField(source="is_staff")
    is_active = serializers.BooleanField()
    date_joined = serializers.DateTimeField()
    budget = BudgetSerializer()
    month_tokens = serializers.IntegerField()
    month_cost = serializers.FloatField()


class UserPatchSerializer(serializers.Serializer):
    is_active = serializers.BooleanField(required=False)
    is_admin = serializers.BooleanField(required=False)


class UserListQuerySerializer(serializers.Serializer):
    # Blank is no search (a query string's empty value is taken as absent), as the schema says.
    search = serializers.CharField(required=False, allow_blank=True, max_length=150,
                                   help_text="Only usernames containing this (blank: everyone).")


class PriceSerializer(serializers.Serializer):
    model = serializers.CharField(max_length=200)
    input_per_million = serializers.FloatField(min_value=0)
    output_per_million = serializers.FloatField(min_value=0)


class PricesSerializer(serializers.Serializer):
    prices = PriceSerializer(many=True)


UsageResultSerializer = inline_serializer("UsageReport", {
    "results": serializers.ListField(child=serializers.DictField()),
    "totals": inline_serializer("UsageTotals", {
        "requests": serializers.IntegerField(), "prompt_tokens": serializers.IntegerField(),
        "completion_tokens": serializers.IntegerField(), "total_tokens": serializers.IntegerField(),
        "cost": serializers.FloatField()})})

BAD_QUERY = OpenApiResponse(description="`invalid`: a query parameter is malformed (details name it).")
NOT_YOURS = OpenApiResponse(
    description="`not_found`: `user` names someone else (only an administrator reads another user's usage).")

# --- views ------------------------------------------------------------------------------------------


def _date(request: Request, name: str, default: date) -> date:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        return date.fromisoformat(raw)
    except ValueError:
        raise AppError("invalid", f"{name} must be a date, YYYY-MM-DD.", 400, {name: ["Must be YYYY-MM-DD."]}) from None


def _group_by(request: Request) -> list[str]:
    raw = request.query_params.get("group_by") or "day"
    groups = [part.strip() for part in raw.split(",") if part.strip()]
    unknown = [group for group in groups if group not in selectors.GROUPS]
    if unknown or not groups or len(groups) > 2 or len(set(groups)) != len(groups):
        raise AppError("invalid", f"group_by takes one or two of {', '.join(selectors.GROUPS)} (comma-separated, "
                       "e.g. day,model).", 400, {"group_by": [f"Not accepted: {raw!r}."]})
    return groups


def _user_filter(request: Request) -> int | None:
    """The user whose usage to read: the caller's own; an admin reads everyone's, or `?user=<id>`'s."""
    raw = request.query_params.get("user")
    if raw is not None and not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
        raise AppError("invalid", "user must be a user id.", 400, {"user": ["Must be a user id."]})
    if not request.user.is_staff:
        if raw is not None and int(raw) != request.user.pk:
            # Like any other user's object: not there for this caller (a 404, never a hint that the id exists).
            raise AppError("not_found", "No user of this id whose usage you may read (only your own).", 404)
        return request.user.pk
    return int(raw) if raw is not None else None


def _agent_filter(request: Request) -> str | None:
    """The agent whose calls to read (`?agent=<slug>`), by slug: an agent deleted or renamed since keeps the usage
    recorded under the slug it had. It narrows what the caller may read anyway (their own; an admin's anyone's)."""
    raw = request.query_params.get("agent")
    if raw is None:
        return None
    if not SLUG.fullmatch(raw):
        raise AppError("invalid", "agent must be an agent's slug: 1-64 of lowercase letters, digits, - and _.", 400,
                       {"agent": [f"Not a slug: {raw[:80]!r}."]})
    return raw


GROUP_NOT_MANAGED = OpenApiResponse(description="`forbidden`: `group` names a group the caller is a member, not a "
                                                "manager, of.")


def _group_filter(request: Request) -> int | None:
    """The user group whose members' usage to read (`?group=<id>`): an admin's any, a manager's theirs (a plain
    member: 403; another group or none: 404). With `?user=` too: 400."""
    raw = request.query_params.get("group")
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
        raise AppError("invalid", "group must be a group id.", 400, {"group": ["Must be a group id."]})
    if request.query_params.get("user") is not None:
        raise AppError("invalid", "Give user or group, not both (group_by=user lists a group's members).", 400,
                       {"group": ["Not with user."]})
    group = group_get_for(request.user, raw)  # another's group: 404, as a missing one
    if not manages(request.user, group):
        raise AppError("forbidden", "Only an administrator or a manager of this group may read its usage.", 403)
    return group.pk


class UsageView(APIView):
    @extend_schema(parameters=[
        OpenApiParameter("from", OpenApiTypes.DATE, description="First day (UTC), inclusive; default 29 days ago."),
        OpenApiParameter("to", OpenApiTypes.DATE, description="Last day (UTC), inclusive; default today."),
        OpenApiParameter("group_by", str, description="One or two of day, model, key, facet, user, agent (e.g. "
                                                      "day,model). By agent: calls for no named agent are `agent: "
                                                      "null`."),
        OpenApiParameter("agent", str, description="Only the calls made for the named agent of this slug (as it was "
                                                   "when called)."),
        OpenApiParameter("user", int, description="Admins: only this user's usage (default: everyone's)."),
        OpenApiParameter("group", int, description="Admins and the group's managers: only the usage of this user "
                                                   "group's current members (all of it in the range)."),
    ], responses={200: UsageResultSerializer, 400: BAD_QUERY, 403: GROUP_NOT_MANAGED, 404: NOT_YOURS})
    def get(self, request: Request) -> Response:
        today = datetime.now(UTC).date()
        end = _date(request, "to", today)
        start = _date(request, "from", end - timedelta(days=29))
        if start > end or (end - start).days > MAX_RANGE_DAYS:
            raise AppError("invalid", f"from must not be after to, and the range at most {MAX_RANGE_DAYS} days.", 400,
                           {"from": ["Must be on or before to, at most ten years before it."]})
        group_by = _group_by(request)
        group_id = _group_filter(request)
        user_id = _user_filter(request) if group_id is None else None
        return Response(selectors.usage_report(start=start, end=end, user_id=user_id, group_by=group_by,
                                               group_id=group_id, agent=_agent_filter(request)))


class BudgetView(APIView):
    @extend_schema(responses={200: inline_serializer("BudgetLeft", {
        "user": serializers.DictField(child=LeftSerializer()),
        "key": serializers.DictField(child=LeftSerializer(), allow_null=True),
        "groups": serializers.ListField(child=inline_serializer("GroupLeft", {
            "id": serializers.IntegerField(), "name": serializers.CharField(),
            "left": serializers.DictField(child=LeftSerializer())}))})})
    def get(self, request: Request) -> Response:
        key = getattr(request, "api_key", None)
        return Response(selectors.budget_left(user_id=request.user.pk, key_id=str(key.pk) if key else "",
                                              key_budget=getattr(key, "budget", None)))


def _user_rows(users: list[Any]) -> list[dict[str, Any]]:
    ids = [user.pk for user in users]
    months, stored = selectors.month_totals(ids), selectors.user_budgets(ids)
    rows = []
    for user in users:
        user.budget = {limit: (stored.get(user.pk) or {}).get(limit) for limit in budgets.LIMITS}
        month = months.get(user.pk, {"tokens": 0, "cost": 0.0})
        user.month_tokens, user.month_cost = month["tokens"], month["cost"]
        rows.append(UserRowSerializer(user).data)
    return rows


def _user(user_id: str) -> AbstractBaseUser:
    """The user of a path's id (any segment: 404, after authentication, for one that names nobody)."""
    user = get_user_model().objects.filter(pk=int(user_id)).first() if user_id.isdigit() else None
    if user is None:
        raise AppError("not_found", "No user has this id.", 404)
    return user


class UserListView(GenericAPIView):
    permission_classes = [IsAdmin]
    serializer_class = UserRowSerializer

    @extend_schema(parameters=[UserListQuerySerializer], responses={200: UserRowSerializer(many=True)})
    def get(self, request: Request) -> Response:
        query = validated(UserListQuerySerializer, request.query_params)
        page = self.paginate_queryset(selectors.user_list(query_text(query, "search")))
        return self.get_paginated_response(_user_rows(list(page)))


# DELETE /api/users/:id's query (issue 44).
class UserDeleteQuerySerializer(serializers.Serializer):
    transfer_to = serializers.IntegerField(required=False, min_value=1, max_value=10**18 - 1, help_text=(
        "The id of the active user who becomes the owner of everything the deleted user owns."))


class UserDetailView(APIView):
    permission_classes = [IsAdmin]

    @extend_schema(request=UserPatchSerializer, responses={200: UserRowSerializer})
    def patch(self, request: Request, user_id: str) -> Response:
        changes = validated(UserPatchSerializer, request.data)
        user = services.user_update(actor=request.user, user=_user(user_id), changes=dict(changes))
        return Response(_user_rows([user])[0])

    # --- DELETE /api/users/:id (issue 44): what the user owns is handed over first, or the delete is refused.
    @extend_schema(parameters=[UserDeleteQuerySerializer], responses={
        204: None,
        400: OpenApiResponse(description="`invalid`: a `transfer_to` that is not a user id, or not another active "
                             "user"),
        409: OpenApiResponse(description="`conflict`: your own account; or the user owns shared "
                                        "resources (`details.owned`: {kind: [{id, name}]}) and no `transfer_to` "
                                        "was given; or the new owner has one of the same name (nothing moved).")})
    def delete(self, request: Request, user_id: str) -> Response:
        target = _user(user_id)
        query = validated(UserDeleteQuerySerializer, request.query_params)
        removal.user_delete(actor=request.user, user=target, transfer_to=query.get("transfer_to"), request=request)
        return Response(status=204)


class UserBudgetView(APIView):
    permission_classes = [IsAdmin]

    @extend_schema(responses={200: BudgetSerializer})
    def get(self, request: Request, user_id: str) -> Response:
        return Response(selectors.budget_of(_user(user_id).pk))

    @extend_schema(request=BudgetSerializer, responses={200: BudgetSerializer})
    def put(self, request: Request, user_id: str) -> Response:
        budget = validated(BudgetSerializer, request.data)
        target = _user(user_id)
        stored = services.budget_set(user_id=target.pk, budget=dict(budget))
        audit("budget.change", request=request, target=f"user:{target.pk}", details={"fields": sorted(budget)})
        return Response(stored)


class PriceView(APIView):
    def get_permissions(self) -> list:
        return [IsAdmin()] if self.request.method != "GET" else super().get_permissions()

    @extend_schema(responses={200: PricesSerializer})
    def get(self, request: Request) -> Response:
        return Response({"prices": PriceSerializer(selectors.price_list(), many=True).data})

    @extend_schema(request=PricesSerializer, responses={200: PricesSerializer})
    def put(self, request: Request) -> Response:
        data = validated(PricesSerializer, request.data)
        return Response({"prices": PriceSerializer(services.prices_set(prices=data["prices"]), many=True).data})

"""Thin views for /api/groups/:id/budget: a user group's budget, which binds every call of every member. Admins set
it; the group's members (managers among them) and admins read it with what the members together used of each
limit; anyone else gets 404 for the group, as for the group itself."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentsite.core.errors import AppError
from agentsite.core.validation import validated
from organisation.selectors import group_get_for
from usage import selectors, services
from usage.api import BudgetSerializer, LeftSerializer

GroupBudgetSerializer = inline_serializer("GroupBudget", {
    "budget": BudgetSerializer(),
    "left": serializers.DictField(child=LeftSerializer(),
                                  help_text="Each limit: what the members together used of it in its window.")})

NOT_ADMIN = OpenApiResponse(description="`forbidden`: only an administrator sets a group's budget.")
NO_GROUP = OpenApiResponse(description="`not_found`: no group of this id that the caller is a member of.")


class GroupBudgetView(APIView):
    @extend_schema(responses={200: GroupBudgetSerializer, 404: NO_GROUP})
    def get(self, request: Request, group_id: str) -> Response:
        group = group_get_for(request.user, group_id)
        return Response(selectors.group_budget_left(group.pk))

    @extend_schema(request=BudgetSerializer, responses={200: GroupBudgetSerializer, 403: NOT_ADMIN, 404: NO_GROUP})
    def put(self, request: Request, group_id: str) -> Response:
        group = group_get_for(request.user, group_id)
        if not request.user.is_staff:
            raise AppError("forbidden", "Only an administrator may set a group's budget.", 403)
        budget = validated(BudgetSerializer, request.data)
        services.group_budget_set(group_id=group.pk, budget=dict(budget), request=request)
        return Response(selectors.group_budget_left(group.pk))

"""Serializers and thin views for /api/groups*: admins manage every group; a group's managers manage its
members; a member reads the group; anyone else gets 404 for it."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentsite.core.errors import AppError
from agentsite.core.validation import validated
from organisation import selectors, services
from organisation.models import GROUP_NAME_PATTERN, GROUP_SOURCES, MANUAL, MEMBER, MEMBER_ROLES, Group

MAX_MODEL_PATTERNS = 200
ADMINS_ONLY = OpenApiResponse(description="`forbidden`: only an administrator changes groups.")
MANAGERS_ONLY = OpenApiResponse(description="`forbidden`: only an administrator or the group's manager changes its "
                                            "members.")


SOURCE_HELP = ("manual (default): members are managed here; oidc: each sign-in through the identity provider "
               "replaces the user's membership by the provider's groups claim (docs/sso.md).")


class GroupSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    description = serializers.CharField()
    members_count = serializers.IntegerField()
    models = serializers.ListField(child=serializers.CharField(), source="allowed_models", allow_null=True,
                                   help_text="The models members may use; null: no restriction.")
    source = serializers.ChoiceField(choices=GROUP_SOURCES, help_text=SOURCE_HELP)
    created_at = serializers.DateTimeField()


class GroupInputSerializer(serializers.Serializer):
    name = serializers.RegexField(GROUP_NAME_PATTERN, max_length=64,
                                  error_messages={"invalid": "Use 1-64 letters, digits, '-' or '_'."})
    description = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
    models = serializers.ListField(
        child=serializers.CharField(max_length=200), max_length=MAX_MODEL_PATTERNS, allow_null=True, required=False,
        help_text="Model patterns: an alias, `connection/model`, `agent`, `workflow:*`, `agent:*`; `*` matches any "
                  "text. null: no restriction.")
    source = serializers.ChoiceField(choices=GROUP_SOURCES, required=False, default=MANUAL, help_text=SOURCE_HELP)


class GroupPatchSerializer(GroupInputSerializer):
    name = serializers.RegexField(GROUP_NAME_PATTERN, max_length=64, required=False,
                                  error_messages={"invalid": "Use 1-64 letters, digits, '-' or '_'."})
    description = serializers.CharField(max_length=2000, required=False, allow_blank=True)
    source = serializers.ChoiceField(choices=GROUP_SOURCES, required=False, help_text=SOURCE_HELP)


class MemberUserSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()


class MemberSerializer(serializers.Serializer):
    user = MemberUserSerializer()
    role = serializers.ChoiceField(choices=MEMBER_ROLES)


class MemberInputSerializer(serializers.Serializer):
    user = serializers.IntegerField(min_value=1, help_text="The user's id.")
    role = serializers.ChoiceField(choices=MEMBER_ROLES, default=MEMBER,
                                   help_text="member, or manager (manages the group's members).")


class MemberRoleSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=MEMBER_ROLES)


def _group_data(group: Group) -> dict[str, Any]:
    if not hasattr(group, "members_count"):
        group = selectors.group_queryset().get(pk=group.pk)
    return GroupSerializer(group).data


def _admin(request: Request, doing: str) -> None:
    if not request.user.is_staff:
        raise AppError("forbidden", f"Only an administrator may {doing}.", 403)


def _manager(request: Request, group: Group) -> None:
    if not selectors.manages(request.user, group):
        raise AppError("forbidden", "Only an administrator or a manager of this group may change its members.", 403)


def _renamed(data: dict[str, Any]) -> dict[str, Any]:
    if "models" in data:
        data["allowed_models"] = data.pop("models")
    return data


class GroupListView(APIView):
    @extend_schema(responses={200: GroupSerializer(many=True)})
    def get(self, request: Request) -> Response:
        return Response(GroupSerializer(selectors.group_list_for(request.user), many=True).data)

    @extend_schema(request=GroupInputSerializer, responses={201: GroupSerializer, 403: ADMINS_ONLY})
    def post(self, request: Request) -> Response:
        _admin(request, "create a group")
        data = _renamed(dict(validated(GroupInputSerializer, request.data)))
        group = services.group_create(request=request, **data)
        return Response(_group_data(group), status=status.HTTP_201_CREATED)


class GroupDetailView(APIView):
    @extend_schema(responses={200: GroupSerializer})
    def get(self, request: Request, group_id: str) -> Response:
        return Response(_group_data(selectors.group_get_for(request.user, group_id)))

    @extend_schema(request=GroupPatchSerializer, responses={200: GroupSerializer, 403: ADMINS_ONLY})
    def patch(self, request: Request, group_id: str) -> Response:
        group = selectors.group_get_for(request.user, group_id)
        _admin(request, "change a group")
        changes = _renamed(dict(validated(GroupPatchSerializer, request.data)))
        services.group_update(group=group, changes=changes, request=request)
        return Response(_group_data(group))

    @extend_schema(responses={204: OpenApiResponse(description="Deleted."), 403: ADMINS_ONLY})
    def delete(self, request: Request, group_id: str) -> Response:
        group = selectors.group_get_for(request.user, group_id)
        _admin(request, "delete a group")
        services.group_delete(group=group, request=request)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MemberListView(APIView):
    @extend_schema(responses={200: MemberSerializer(many=True)})
    def get(self, request: Request, group_id: str) -> Response:
        group = selectors.group_get_for(request.user, group_id)
        return Response(MemberSerializer(selectors.member_list(group), many=True).data)

    @extend_schema(request=MemberInputSerializer, responses={201: MemberSerializer, 403: MANAGERS_ONLY})
    def post(self, request: Request, group_id: str) -> Response:
        group = selectors.group_get_for(request.user, group_id)
        _manager(request, group)
        data = validated(MemberInputSerializer, request.data)
        membership = services.member_add(group=group, user_id=data["user"], role=data["role"], request=request)
        return Response(MemberSerializer(membership).data, status=status.HTTP_201_CREATED)


class MemberDetailView(APIView):
    @extend_schema(request=MemberRoleSerializer, responses={200: MemberSerializer, 403: MANAGERS_ONLY})
    def patch(self, request: Request, group_id: str, user_id: str) -> Response:
        group = selectors.group_get_for(request.user, group_id)
        _manager(request, group)
        data = validated(MemberRoleSerializer, request.data)
        membership = services.member_update(group=group, user_id=user_id, role=data["role"], request=request)
        return Response(MemberSerializer(membership).data)

    @extend_schema(responses={204: OpenApiResponse(description="Removed from the group."), 403: MANAGERS_ONLY})
    def delete(self, request: Request, group_id: str, user_id: str) -> Response:
        group = selectors.group_get_for(request.user, group_id)
        _manager(request, group)
        services.member_remove(group=group, user_id=user_id, request=request)
        return Response(status=status.HTTP_204_NO_CONTENT)

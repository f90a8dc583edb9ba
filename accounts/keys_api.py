"""Serializers and thin views for /api/keys: a user's API keys (accounts.models.ApiKey)."""

from __future__ import annotations

import time

from django.core.exceptions import ValidationError
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import selectors, services
from accounts.models import ApiKey, validate_budget
from accounts.tokens import password_version
from agentsite.core.audit import audit
from agentsite.core.errors import AppError
from agentsite.core.validation import validated


def _budget(value):
    try:
        validate_budget(value)
    except ValidationError as exc:
        raise serializers.ValidationError(exc.messages) from exc
    return value


class BudgetField(serializers.JSONField):
    """{tokens_per_day?, tokens_per_month?, cost_per_day?, cost_per_month?, requests_per_minute?,
    tokens_per_minute?}: each a non-negative number or null (no limit); null: no budget of its own."""

    def __init__(self, **kwargs):
        super().__init__(allow_null=True, validators=[_budget], **kwargs)


class KeyOwnerSerializer(serializers.Serializer):
    id = serializers.CharField(source="pk")
    username = serializers.CharField()


class KeySerializer(serializers.ModelSerializer):
    user = KeyOwnerSerializer(read_only=True)
    budget = BudgetField(read_only=True)
    created_by_key = serializers.IntegerField(source="created_by_key_id", read_only=True, allow_null=True,
                                              help_text="The key that made this one (null: a dashboard token).")
    status = serializers.SerializerMethodField(
        help_text="active, revoked, expired, password_changed (made before its user's password changed) or "
                  "user_inactive: whether the key works now.")

    class Meta:
        model = ApiKey
        fields = ["id", "name", "prefix", "scopes", "created_at", "expires_at", "last_used_at", "revoked",
                  "revoked_at", "budget", "created_by_key", "status", "user"]

    def get_status(self, key: ApiKey) -> str:
        if key.revoked:
            return "revoked"
        if key.expires_at is not None and key.expires_at.timestamp() <= time.time():
            return "expired"
        if not key.user.is_active:
            return "user_inactive"
        if key.password_version != password_version(key.user):
            return "password_changed"
        return "active"


class KeyCreatedSerializer(KeySerializer):
    key = serializers.CharField(help_text="The secret: shown this once, never again.")

    class Meta(KeySerializer.Meta):
        fields = ["key", *KeySerializer.Meta.fields]


class KeyInputSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    scopes = serializers.ListField(child=serializers.ChoiceField(choices=ApiKey.SCOPES), max_length=len(ApiKey.SCOPES),
                                   required=False, help_text="Default [\"v1\"].")
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    budget = BudgetField(required=False)


class KeyUpdateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100, required=False)
    budget = BudgetField(required=False)


class KeyListQuerySerializer(serializers.Serializer):
    user = serializers.IntegerField(required=False, min_value=1, help_text="Admins: this user's keys.")
    all = serializers.BooleanField(required=False, default=False, help_text="Admins: everyone's keys.")


def _is_admin(request: Request) -> bool:
    return bool(request.user.is_active and request.user.is_staff)


class KeyListView(GenericAPIView):
    serializer_class = KeySerializer

    @extend_schema(parameters=[OpenApiParameter("user", int), OpenApiParameter("all", bool)],
                   responses={200: KeySerializer(many=True),
                              403: OpenApiResponse(description="`forbidden`: ?user= or ?all= from a non-admin")})
    def get(self, request: Request) -> Response:
        query = validated(KeyListQuerySerializer, request.query_params)
        if (query.get("user") is not None or query.get("all")) and not _is_admin(request):
            raise AppError("forbidden", "Only an administrator may list other users' keys.", 403)
        keys = selectors.key_list_for(user=request.user, owner_id=query.get("user"), everyone=query.get("all"))
        page = self.paginate_queryset(keys)
        return self.get_paginated_response(KeySerializer(page, many=True).data)

    @extend_schema(request=KeyInputSerializer, responses={
        201: KeyCreatedSerializer, 403: OpenApiResponse(description="`forbidden`: the admin scope from a "
                                                                    "non-admin; from a key, more than that key has "
                                                                    "(a scope, a looser budget, a later expiry)"),
        409: OpenApiResponse(description="`conflict`: too many live keys")})
    def post(self, request: Request) -> Response:
        data = validated(KeyInputSerializer, request.data)
        parent = getattr(request, "api_key", None)
        key, secret = services.key_create(user=request.user, parent=parent, **data)
        audit("key.create", request=request, target=f"key:{key.pk}",
              details={"scopes": list(key.scopes), "fields": sorted(data),
                       "key_id": None if parent is None else parent.pk})
        key.key = secret
        return Response(KeyCreatedSerializer(key).data, status=status.HTTP_201_CREATED)


class KeyDetailView(APIView):
    @extend_schema(responses={200: KeySerializer})
    def get(self, request: Request, pk: str) -> Response:
        return Response(KeySerializer(selectors.key_get_for(user=request.user, key_id=pk)).data)

    @extend_schema(request=KeyUpdateSerializer, responses={200: KeySerializer})
    def patch(self, request: Request, pk: str) -> Response:
        key = selectors.key_get_for(user=request.user, key_id=pk)
        changes = validated(KeyUpdateSerializer, request.data, partial=True)
        updated = services.key_update(key=key, changes=dict(changes), acting_key=getattr(request, "api_key", None))
        if "budget" in changes:
            audit("budget.change", request=request, target=f"key:{key.pk}",
                  details={"fields": sorted(changes.get("budget") or {})})
        return Response(KeySerializer(updated).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, pk: str) -> Response:
        key = selectors.key_get_for(user=request.user, key_id=pk)
        below = services.key_revoke(key=key)
        audit("key.revoke", request=request, target=f"key:{key.pk}",
              details={"owner_id": key.user_id, "revoked_below": below})
        return Response(status=status.HTTP_204_NO_CONTENT)

"""/api/connections: the upstream LLM endpoints, administrators only. Keys and header values are write-only,
a base URL's credentials are shown masked."""

from __future__ import annotations

import re

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentsite.agent.providers import PROVIDERS
from agentsite.agent.providers.urls import mask_url, url_secrets
from agentsite.core.audit import audit
from agentsite.core.permissions import IsAdmin
from agentsite.core.validation import validated
from catalogue import services
from catalogue.config_api import base_url_checked
from catalogue.models import Connection
from catalogue.selectors import config_get, connection_get, connection_list


class ConnectionOutputSerializer(serializers.ModelSerializer):
    base_url = serializers.SerializerMethodField(help_text="Credentials in it (a password, query values) as ***.")
    discovery_error = serializers.SerializerMethodField()
    api_key_set = serializers.SerializerMethodField()
    header_names = serializers.SerializerMethodField(help_text="The extra headers' names (values are write-only).")
    models = serializers.SerializerMethodField(help_text='The model names, or "discover".')
    is_default = serializers.SerializerMethodField(help_text="Bare model names resolve against this connection.")

    class Meta:
        model = Connection
        fields = ["id", "name", "provider", "base_url", "api_key_set", "models", "discovered", "discovery_error",
                  "discovered_at", "header_names", "timeout_s", "enabled", "passthrough", "is_default", "created_at",
                  "updated_at"]

    def get_api_key_set(self, connection: Connection) -> bool:
        return bool(connection.api_key)

    def get_base_url(self, connection: Connection) -> str:
        return mask_url(connection.base_url)

    def get_discovery_error(self, connection: Connection) -> str:
        # Scrubbed when stored (providers.http); again here for one stored before that was so.
        text = connection.discovery_error
        for secret in sorted(url_secrets(connection.base_url), key=len, reverse=True):
            text = text.replace(secret, "[redacted]") if len(secret) >= 4 else text
        return text

    def get_header_names(self, connection: Connection) -> list[str]:
        return sorted(connection.headers or {})

    def get_models(self, connection: Connection) -> list[str] | str:
        return connection.models if connection.discovers else list(connection.models or [])

    def get_is_default(self, connection: Connection) -> bool:
        return config_get().connection_id == connection.pk


# Never in a model name or a header value: PostgreSQL refuses a NUL in text, and a line break would split a header.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def _model_names(value):
    if value == Connection.DISCOVER:
        return value
    if not isinstance(value, list) or not all(isinstance(name, str) and name.strip() for name in value):
        raise serializers.ValidationError('Give a list of model names, or "discover".')
    if len(value) > 1000 or any(len(name) > 200 for name in value):
        raise serializers.ValidationError("At most 1000 names of at most 200 characters.")
    if any(CONTROL_CHARACTERS.search(name) for name in value):
        raise serializers.ValidationError("A model name may not hold a control character (NUL, a line break, ...).")
    return list(dict.fromkeys(name.strip() for name in value))


def _header_values(value):
    if not isinstance(value, dict) or len(value) > 50:
        raise serializers.ValidationError('Give an object of at most 50 headers: {"X-Name": "value"}.')
    for name, item in value.items():
        if not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}", name):
            raise serializers.ValidationError(f"{name!r} is not a header name.")
        if item is not None and (not isinstance(item, str) or len(item) > 4000 or CONTROL_CHARACTERS.search(item)):
            raise serializers.ValidationError(f"The value of {name} must be a one-line string (or null to remove it).")
    return value


class ConnectionInputSerializer(serializers.Serializer):
    name = serializers.RegexField(r"^[a-z0-9_-]+$", max_length=64,
                                  error_messages={"invalid": "Use lowercase letters, digits, _ and - only."})
    provider = serializers.ChoiceField(choices=list(PROVIDERS))
    base_url = serializers.URLField(max_length=500, allow_blank=True, required=False)
    api_key = serializers.CharField(max_length=500, allow_blank=True, required=False, write_only=True)
    models = serializers.JSONField(required=False, help_text='A list of model names, or "discover".')
    headers = serializers.JSONField(required=False,
                                    help_text="Extra headers to send; write-only values (null removes one).")
    timeout_s = serializers.FloatField(min_value=0.1, max_value=3600, required=False)
    enabled = serializers.BooleanField(required=False)
    passthrough = serializers.BooleanField(required=False, help_text=(
        "Send /v1/chat/completions request fields this server does not know to this upstream as they came "
        "(default false: a 400 naming the field)."))

    def validate_models(self, value):
        return _model_names(value)

    def validate_headers(self, value):
        return _header_values(value)


def _connection_data(data: dict) -> dict:
    out = dict(data)
    if isinstance(out.get("headers"), dict):
        out["headers"] = dict(out["headers"])
    return out


class ConnectionListView(APIView):
    permission_classes = [IsAuthenticated, IsAdmin]

    @extend_schema(responses={200: ConnectionOutputSerializer(many=True)})
    def get(self, request: Request) -> Response:
        return Response(ConnectionOutputSerializer(connection_list(), many=True).data)

    @extend_schema(request=ConnectionInputSerializer, responses={
        201: ConnectionOutputSerializer, 409: OpenApiResponse(description="`conflict`: the name is taken")})
    def post(self, request: Request) -> Response:
        data = base_url_checked(_connection_data(validated(ConnectionInputSerializer, request.data)), None)
        if isinstance(data.get("headers"), dict):
            data["headers"] = {name: value for name, value in data["headers"].items() if value is not None}
        connection = services.connection_create(data=data)
        audit("connection.create", request=request, target=f"connection:{connection.name}",
              details={"fields": sorted(data)})
        return Response(ConnectionOutputSerializer(connection).data, status=status.HTTP_201_CREATED)


class ConnectionDetailView(APIView):
    permission_classes = [IsAuthenticated, IsAdmin]

    @extend_schema(responses={200: ConnectionOutputSerializer})
    def get(self, request: Request, connection_id: str) -> Response:
        return Response(ConnectionOutputSerializer(connection_get(connection_id=connection_id)).data)

    @extend_schema(request=ConnectionInputSerializer, responses={200: ConnectionOutputSerializer})
    def patch(self, request: Request, connection_id: str) -> Response:
        connection = connection_get(connection_id=connection_id)
        changes = base_url_checked(_connection_data(validated(ConnectionInputSerializer, request.data,
                                                              partial=True)), connection)
        connection = services.connection_update(connection=connection, changes=changes)
        audit("connection.update", request=request, target=f"connection:{connection.name}",
              details={"fields": sorted(changes)})
        return Response(ConnectionOutputSerializer(connection).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, connection_id: str) -> Response:
        connection = connection_get(connection_id=connection_id)
        services.connection_delete(connection=connection)
        audit("connection.delete", request=request, target=f"connection:{connection.name}")
        return Response(status=status.HTTP_204_NO_CONTENT)


class ConnectionDiscoverView(APIView):
    permission_classes = [IsAuthenticated, IsAdmin]

    @extend_schema(request=None, responses={200: ConnectionOutputSerializer})
    def post(self, request: Request, connection_id: str) -> Response:
        connection = services.connection_discover(connection=connection_get(connection_id=connection_id))
        return Response(ConnectionOutputSerializer(connection).data)

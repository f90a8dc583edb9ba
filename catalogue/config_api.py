"""/api/config: the agent's configuration, read by any user (its connection's fields by administrators only)
and changed by administrators."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentsite.agent.providers import PROVIDERS
from agentsite.agent.providers.urls import credentials_problem, mask_url, unmask_url
from agentsite.core.audit import audit
from agentsite.core.errors import AppError
from agentsite.core.permissions import IsAdmin
from agentsite.core.validation import validated
from catalogue import services
from catalogue.models import AgentConfig, Connection
from catalogue.selectors import config_get

# The config output's fields that describe its connection: an administrator's only (docs/api.md).
CONNECTION_FIELDS = ("provider", "base_url", "api_key_set", "connection")


def _is_admin(request: Request | None) -> bool:
    user = getattr(request, "user", None)
    return bool(user and user.is_authenticated and user.is_staff)


class _AdminOnly(serializers.Field):
    """An output field read from the whole config, which the schema marks optional (not read-only, which
    drf-spectacular makes required): ConfigOutputSerializer leaves it out for users who are not administrators."""

    def __init__(self, read, **kwargs):
        self.read = read
        super().__init__(source="*", required=False, **kwargs)

    def to_representation(self, value):
        return self.read(value)


@extend_schema_field(OpenApiTypes.STR)
class _AdminOnlyText(_AdminOnly):
    pass


@extend_schema_field(OpenApiTypes.BOOL)
class _AdminOnlyFlag(_AdminOnly):
    pass


@extend_schema_field({"type": "integer", "nullable": True})
class _AdminOnlyId(_AdminOnly):
    pass


class ConfigOutputSerializer(serializers.ModelSerializer):
    # provider, base_url, api_key_set and connection are the config's connection's (its `default` one after an
    # upgrade): an administrator's only (context `request`); the base URL is shown masked.
    provider = _AdminOnlyText(lambda config: config.connection.provider if config.connection else "offline",
                              help_text="Administrators only.")
    base_url = _AdminOnlyText(lambda config: mask_url(config.connection.base_url) if config.connection else "",
                              help_text="Administrators only; credentials in it (a password, query values) as ***.")
    api_key_set = _AdminOnlyFlag(lambda config: bool(config.connection and config.connection.api_key),
                                 help_text="Administrators only.")
    connection = _AdminOnlyId(lambda config: config.connection_id, help_text="Administrators only: the id of the "
                              "connection a bare model name resolves against (null: none).")

    class Meta:
        model = AgentConfig
        exclude = ["id"]

    def to_representation(self, instance: AgentConfig) -> dict:
        data = super().to_representation(instance)
        if not _is_admin(self.context.get("request")):
            for name in CONNECTION_FIELDS:
                data.pop(name, None)
        return data


class ConfigInputSerializer(serializers.ModelSerializer):
    provider = serializers.ChoiceField(choices=list(PROVIDERS), required=False)
    api_key = serializers.CharField(max_length=500, allow_blank=True, required=False, write_only=True,
                                    trim_whitespace=True)
    base_url = serializers.URLField(max_length=500, allow_blank=True, required=False)
    model = serializers.CharField(max_length=300, allow_blank=True, required=False)
    temperature = serializers.FloatField(min_value=0.0, max_value=2.0, required=False)
    max_tokens = serializers.IntegerField(min_value=1, max_value=1_000_000, required=False)
    kb_top_k = serializers.IntegerField(min_value=1, max_value=50, required=False)
    kb_max_chars = serializers.IntegerField(min_value=1, max_value=1_000_000, required=False)
    system_prompt = serializers.CharField(max_length=20_000, allow_blank=True, required=False,
                                          trim_whitespace=False)
    tools = serializers.ListField(child=serializers.CharField(max_length=200), max_length=500, required=False)

    class Meta:
        model = AgentConfig
        fields = list(services.CONFIG_FIELDS)


class ConfigView(APIView):
    def get_permissions(self):
        if self.request.method in ("PUT", "PATCH"):
            return [IsAuthenticated(), IsAdmin()]
        return [IsAuthenticated()]

    @extend_schema(responses={200: ConfigOutputSerializer})
    def get(self, request: Request) -> Response:
        return Response(ConfigOutputSerializer(config_get(), context={"request": request}).data)

    @extend_schema(request=ConfigInputSerializer, responses={200: ConfigOutputSerializer})
    def put(self, request: Request) -> Response:
        return self._update(request)

    @extend_schema(request=ConfigInputSerializer, responses={200: ConfigOutputSerializer})
    def patch(self, request: Request) -> Response:
        return self._update(request)

    def _update(self, request: Request) -> Response:
        if not isinstance(request.data, dict):
            raise AppError("invalid", "Send a JSON object of config fields.", 400)
        unknown = sorted(set(request.data) - set(services.CONFIG_FIELDS))
        if unknown:
            raise AppError("unknown_field", f"Not a config field: {', '.join(unknown)}.", 400,
                           {"fields": unknown, "allowed": list(services.CONFIG_FIELDS)})
        # Every listed field is optional: PUT and PATCH both take any subset (docs/api.md).
        changes = base_url_checked(dict(validated(ConfigInputSerializer, request.data, partial=True)),
                                   config_get().connection)
        config = services.config_update(changes=changes)
        audit("config.change", request=request, target="config", details={"fields": sorted(changes)})
        return Response(ConfigOutputSerializer(config, context={"request": request}).data)


def base_url_checked(changes: dict, current: Connection | None) -> dict:
    """`changes` (provider, base_url, api_key of a connection) with a base URL's `***` sent back as it was shown
    meaning the stored credentials (providers.urls.unmask_url). Raises AppError 400 `invalid` naming base_url
    and api_key when they cannot both be sent (providers.urls.credentials_problem)."""
    if current is not None and "base_url" in changes:
        changes["base_url"] = unmask_url(changes["base_url"], current.base_url)
    problem = credentials_problem(changes.get("provider", current.provider if current else "openai"),
                                  changes.get("base_url", current.base_url if current else ""),
                                  changes.get("api_key", current.api_key if current else ""))
    if problem:
        raise AppError("invalid", problem, 400, {"base_url": [problem], "api_key": [problem]})
    return changes

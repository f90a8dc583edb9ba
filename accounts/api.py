"""Serializers and thin views for /api/auth/* and /api/config."""

from __future__ import annotations

import re

from django.contrib.auth import authenticate, get_user_model
from django.contrib.auth.validators import UnicodeUsernameValidator
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny, BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import services
from accounts.models import PROVIDERS as PROVIDER_CHOICES
from accounts.models import AgentConfig, Connection, ModelAlias
from accounts.ratelimit import client_ip, login_attempt_check, password_change_attempt_check, registration_slot
from accounts.selectors import alias_get, alias_list, config_get, connection_get, connection_list
from accounts.tokens import token_pair_for
from agentsite.agent.providers.urls import credentials_problem, mask_url, unmask_url, url_secrets
from agentsite.core.audit import audit
from agentsite.core.errors import AppError
from agentsite.core.validation import validated

User = get_user_model()


class IsAdmin(BasePermission):
    """Staff users: they may change the agent's config and start processes on the host."""

    message = "Only an administrator may do this."

    def has_permission(self, request, view) -> bool:
        return bool(request.user and request.user.is_authenticated and request.user.is_staff)


# --- serializers ------------------------------------------------------------------------------------

class UserSerializer(serializers.Serializer):
    id = serializers.CharField(source="pk")
    username = serializers.CharField()
    is_admin = serializers.BooleanField(source="is_staff")
    date_joined = serializers.DateTimeField()


class CredentialsSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150, validators=[UnicodeUsernameValidator()])
    password = serializers.CharField(max_length=4096, trim_whitespace=False)


class LoginSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, trim_whitespace=False)


class RefreshSerializer(serializers.Serializer):
    refresh = serializers.CharField()


class PasswordChangeSerializer(serializers.Serializer):
    old_password = serializers.CharField(trim_whitespace=False)
    new_password = serializers.CharField(max_length=4096, trim_whitespace=False)


class TokenPairSerializer(serializers.Serializer):
    token = serializers.CharField()
    refresh = serializers.CharField()


class AuthResultSerializer(TokenPairSerializer):
    user = UserSerializer()


def _auth_result(user) -> dict:
    return {**token_pair_for(user), "user": UserSerializer(user).data}


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
    provider = serializers.ChoiceField(choices=PROVIDER_CHOICES, required=False)
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


# --- views ------------------------------------------------------------------------------------------

class LoginView(APIView):
    permission_classes = [AllowAny]
    authentication_classes: list = []

    @extend_schema(request=LoginSerializer, responses={
        200: AuthResultSerializer, 401: OpenApiResponse(description="`invalid_credentials`")})
    def post(self, request: Request) -> Response:
        tried = str(request.data.get("username", ""))[:150] if isinstance(request.data, dict) else ""
        try:
            login_attempt_check(ip=client_ip(request))
        except AppError:
            audit("auth.login", outcome="refused", request=request, actor_name=tried,
                  details={"reason": "rate_limited"})
            raise
        data = validated(LoginSerializer, request.data)
        user = authenticate(request, username=data["username"], password=data["password"])
        if user is None:
            audit("auth.login", outcome="failure", request=request, actor_name=tried)
            raise AppError("invalid_credentials", "The username or password is wrong.", 401)
        audit("auth.login", request=request, actor=user, door="jwt")
        return Response(_auth_result(user))


class RegisterView(APIView):
    permission_classes = [AllowAny]
    authentication_classes: list = []

    @extend_schema(request=CredentialsSerializer, responses={
        201: AuthResultSerializer, 403: OpenApiResponse(description="`registration_closed`"),
        429: OpenApiResponse(description="`rate_limited`: AGENTSITE_REGISTER_RATE_LIMIT accounts an hour from one "
                                         "client address were made (details: retry_after; Retry-After header).")})
    def post(self, request: Request) -> Response:
        if not config_get().allow_registration:
            raise AppError("registration_closed", "Registration is closed on this server; ask an admin.", 403)
        data = validated(CredentialsSerializer, request.data)
        try:
            with registration_slot(ip=client_ip(request)):
                user = services.user_register(username=data["username"], password=data["password"])
        except AppError as exc:
            audit("auth.register", outcome="refused" if exc.status == 429 else "failure", request=request,
                  actor_name=data["username"], details={"code": exc.code}, coalesce=exc.code)
            raise
        audit("auth.register", request=request, actor=user, door="jwt", target=f"user:{user.pk}")
        return Response(_auth_result(user), status=status.HTTP_201_CREATED)


class AuthOptionsSerializer(serializers.Serializer):
    registration_open = serializers.BooleanField(help_text="Whether POST /api/auth/register creates accounts.")


class AuthOptionsView(APIView):
    """What a log-in form shows before anyone logs in: public, read-only, and no more than the register
    endpoint itself would tell an anonymous caller (it answers 403 `registration_closed` when closed)."""

    permission_classes = [AllowAny]
    authentication_classes: list = []

    @extend_schema(responses={200: AuthOptionsSerializer})
    def get(self, request: Request) -> Response:
        return Response(AuthOptionsSerializer({"registration_open": config_get().allow_registration}).data)


class RefreshView(APIView):
    permission_classes = [AllowAny]
    authentication_classes: list = []

    @extend_schema(request=RefreshSerializer, responses={
        200: TokenPairSerializer, 401: OpenApiResponse(description="`token_invalid`: expired, revoked or used")})
    def post(self, request: Request) -> Response:
        data = validated(RefreshSerializer, request.data)
        try:
            return Response(services.tokens_refresh(refresh=data["refresh"]))
        except AppError:
            reused_by = services.refresh_reused(data["refresh"])
            if reused_by is not None:
                audit("auth.refresh_reuse", outcome="refused", request=request, actor=reused_by, door="jwt")
            raise


class LogoutView(APIView):
    @extend_schema(request=RefreshSerializer, responses={204: None})
    def post(self, request: Request) -> Response:
        data = validated(RefreshSerializer, request.data)
        services.tokens_logout(user=request.user, refresh=data["refresh"], access=request.auth)
        audit("auth.logout", request=request)
        return Response(status=status.HTTP_204_NO_CONTENT)


class PasswordChangeView(APIView):
    @extend_schema(request=PasswordChangeSerializer, responses={
        200: TokenPairSerializer, 400: OpenApiResponse(description="`invalid`: a wrong old password, a weak new one"),
        429: OpenApiResponse(description="`rate_limited`: past AGENTSITE_LOGIN_RATE_LIMIT attempts a minute for the "
                                         "user or the client address (details: retry_after; Retry-After header)")})
    def post(self, request: Request) -> Response:
        data = validated(PasswordChangeSerializer, request.data)
        try:
            password_change_attempt_check(ip=client_ip(request), user_id=request.user.pk)
        except AppError as exc:
            audit("auth.password_change", outcome="refused", request=request, details={"code": exc.code},
                  coalesce=exc.code)
            raise
        try:
            pair = services.user_password_change(user=request.user, old_password=data["old_password"],
                                                 new_password=data["new_password"])
        except AppError as exc:
            audit("auth.password_change", outcome="failure", request=request, details={"code": exc.code},
                  coalesce=exc.code)
            raise
        audit("auth.password_change", request=request, target=f"user:{request.user.pk}")
        return Response(pair)


class MeView(APIView):
    @extend_schema(responses={200: UserSerializer})
    def get(self, request: Request) -> Response:
        return Response(UserSerializer(request.user).data)


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



# --- connections, aliases, the model list -----------------------------------------------------------------

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
    provider = serializers.ChoiceField(choices=PROVIDER_CHOICES)
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


class AliasTargetSerializer(serializers.Serializer):
    model = serializers.CharField(max_length=300)
    weight = serializers.FloatField(min_value=0, max_value=1_000_000, required=False, default=1.0)


class AliasInputSerializer(serializers.Serializer):
    name = serializers.RegexField(r"^[a-z0-9][a-z0-9_.:-]*$", max_length=100,
                                  error_messages={"invalid": "Use lowercase letters, digits, _ . : and - (no /)."})
    strategy = serializers.ChoiceField(choices=[name for name, _ in ModelAlias.STRATEGIES], required=False)
    targets = AliasTargetSerializer(many=True, allow_empty=False, max_length=50)
    fallback_on = serializers.ListField(child=serializers.IntegerField(min_value=400, max_value=499), max_length=100,
                                        required=False)


class AliasOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = ModelAlias
        fields = ["id", "name", "strategy", "targets", "fallback_on", "created_at", "updated_at"]


def _targets(data: dict) -> dict:
    if "targets" in data:
        data["targets"] = [{"model": target["model"], "weight": target.get("weight", 1.0)}
                           for target in data["targets"]]
    return data


class AliasListView(APIView):
    def get_permissions(self):
        return [IsAuthenticated(), IsAdmin()]

    @extend_schema(responses={200: AliasOutputSerializer(many=True)})
    def get(self, request: Request) -> Response:
        return Response(AliasOutputSerializer(alias_list(), many=True).data)

    @extend_schema(request=AliasInputSerializer, responses={
        201: AliasOutputSerializer, 409: OpenApiResponse(description="`conflict`: the name is taken")})
    def post(self, request: Request) -> Response:
        data = _targets(dict(validated(AliasInputSerializer, request.data)))
        alias = services.alias_create(data=data)
        audit("alias.create", request=request, target=f"alias:{alias.name}", details={"fields": sorted(data)})
        return Response(AliasOutputSerializer(alias).data, status=status.HTTP_201_CREATED)


class AliasDetailView(APIView):
    permission_classes = [IsAuthenticated, IsAdmin]

    @extend_schema(responses={200: AliasOutputSerializer})
    def get(self, request: Request, alias_id: str) -> Response:
        return Response(AliasOutputSerializer(alias_get(alias_id=alias_id)).data)

    @extend_schema(request=AliasInputSerializer, responses={200: AliasOutputSerializer})
    def patch(self, request: Request, alias_id: str) -> Response:
        alias = alias_get(alias_id=alias_id)
        changes = _targets(dict(validated(AliasInputSerializer, request.data, partial=True)))
        alias = services.alias_update(alias=alias, changes=changes)
        audit("alias.update", request=request, target=f"alias:{alias.name}", details={"fields": sorted(changes)})
        return Response(AliasOutputSerializer(alias).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, alias_id: str) -> Response:
        alias = alias_get(alias_id=alias_id)
        services.alias_delete(alias=alias)
        audit("alias.delete", request=request, target=f"alias:{alias.name}")
        return Response(status=status.HTTP_204_NO_CONTENT)


class CatalogueEntrySerializer(serializers.Serializer):
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=["alias", "model"])
    state = serializers.CharField(help_text="ok | cooling | discovery_failed | no_target")
    connection = serializers.CharField(required=False)
    provider = serializers.CharField(required=False)
    model = serializers.CharField(required=False)
    strategy = serializers.CharField(required=False)
    targets = serializers.ListField(child=serializers.CharField(), required=False)


class CatalogueSerializer(serializers.Serializer):
    default = serializers.CharField(help_text="The agent's default model (config `model`, or the default "
                                              "connection's first model).")
    models = CatalogueEntrySerializer(many=True)


class ModelsView(APIView):
    """The model catalogue for pickers: aliases and `<connection>/<model>` entries with their state (any user)."""

    @extend_schema(responses={200: CatalogueSerializer})
    def get(self, request: Request) -> Response:
        from accounts.selectors import settings_get
        from agentsite.agent import routing

        settings = settings_get()
        entries = [entry.as_dict() for entry in routing.catalogue_entries(settings)]
        return Response({"default": routing.default_model_name(settings), "models": entries})

"""Serializers and thin views for /api/auth/* and /api/config."""

from __future__ import annotations

from django.contrib.auth import authenticate, get_user_model
from django.contrib.auth.validators import UnicodeUsernameValidator
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny, BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import services
from accounts.models import AgentConfig
from accounts.ratelimit import client_ip, login_attempt_check, registration_slot
from accounts.selectors import config_get
from accounts.tokens import token_pair_for
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


class ConfigOutputSerializer(serializers.ModelSerializer):
    api_key_set = serializers.SerializerMethodField()

    class Meta:
        model = AgentConfig
        exclude = ["id", "api_key"]

    def get_api_key_set(self, config: AgentConfig) -> bool:
        return bool(config.api_key)


class ConfigInputSerializer(serializers.ModelSerializer):
    api_key = serializers.CharField(max_length=500, allow_blank=True, required=False, write_only=True,
                                    trim_whitespace=True)
    base_url = serializers.URLField(max_length=500, allow_blank=True, required=False)
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
        login_attempt_check(ip=client_ip(request))
        data = validated(LoginSerializer, request.data)
        user = authenticate(request, username=data["username"], password=data["password"])
        if user is None:
            raise AppError("invalid_credentials", "The username or password is wrong.", 401)
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
        with registration_slot(ip=client_ip(request)):
            user = services.user_register(username=data["username"], password=data["password"])
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
        return Response(services.tokens_refresh(refresh=data["refresh"]))


class LogoutView(APIView):
    @extend_schema(request=RefreshSerializer, responses={204: None})
    def post(self, request: Request) -> Response:
        data = validated(RefreshSerializer, request.data)
        services.tokens_logout(user=request.user, refresh=data["refresh"], access=request.auth)
        return Response(status=status.HTTP_204_NO_CONTENT)


class PasswordChangeView(APIView):
    @extend_schema(request=PasswordChangeSerializer, responses={200: TokenPairSerializer})
    def post(self, request: Request) -> Response:
        data = validated(PasswordChangeSerializer, request.data)
        pair = services.user_password_change(user=request.user, old_password=data["old_password"],
                                             new_password=data["new_password"])
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
        return Response(ConfigOutputSerializer(config_get()).data)

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
        changes = validated(ConfigInputSerializer, request.data, partial=True)
        config = services.config_update(changes=dict(changes))
        return Response(ConfigOutputSerializer(config).data)


"""Serializers and thin views for /api/auth/*: log-in, registration, tokens, the password, the caller."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import authenticate, get_user_model
from django.contrib.auth.validators import UnicodeUsernameValidator
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import services
from accounts.backends import may_use_password, password_login_on
from accounts.ratelimit import client_ip, login_attempt_check, password_change_attempt_check, registration_slot
from accounts.tokens import token_pair_for
from agentsite.core.audit import audit
from agentsite.core.errors import AppError
from agentsite.core.permissions import IsAdmin as IsAdmin  # re-exported: the apps' admin-only views name it here
from agentsite.core.validation import validated
from catalogue.selectors import config_get
from organisation.selectors import memberships

User = get_user_model()


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


# --- views ------------------------------------------------------------------------------------------

class LoginView(APIView):
    permission_classes = [AllowAny]
    authentication_classes: list = []

    @extend_schema(request=LoginSerializer, responses={
        200: AuthResultSerializer, 401: OpenApiResponse(description="`invalid_credentials`"),
        403: OpenApiResponse(description="`password_login_disabled`: AGENTSITE_PASSWORD_LOGIN=0 and the user is not "
                                         "break-glass (or the credentials are wrong)")})
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
        if user is None and not password_login_on():
            # Off: every failure is this one answer, so it tells no one whether the name is break-glass or the
            # password was right (accounts.backends lets only break-glass users past a password).
            audit("auth.login", outcome="refused", request=request, actor_name=tried,
                  details={"reason": "password_login_disabled"}, coalesce="password_login_disabled")
            raise AppError("password_login_disabled", "Password sign-in is turned off on this server: sign in "
                           "with single sign-on.", 403)
        if user is None:
            audit("auth.login", outcome="failure", request=request, actor_name=tried)
            raise AppError("invalid_credentials", "The username or password is wrong.", 401)
        # With passwords off, only a break-glass user gets here: the operator's way round a broken provider,
        # which the audit log names as such.
        details = {"method": "password"} if password_login_on() else {"method": "password", "break_glass": True}
        audit("auth.login", request=request, actor=user, door="jwt", details=details)
        return Response(_auth_result(user))


class RegisterView(APIView):
    permission_classes = [AllowAny]
    authentication_classes: list = []

    @extend_schema(request=CredentialsSerializer, responses={
        201: AuthResultSerializer, 403: OpenApiResponse(description="`registration_closed`"),
        429: OpenApiResponse(description="`rate_limited`: AGENTSITE_REGISTER_RATE_LIMIT accounts an hour from one "
                                         "client address were made (details: retry_after; Retry-After header).")})
    def post(self, request: Request) -> Response:
        if not password_login_on():
            raise AppError("registration_closed", "Registration is closed: this server signs people in through "
                           "single sign-on.", 403)
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


class SsoOptionSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="The provider's id (`oidc`).")
    name = serializers.CharField(help_text="The button's label (AGENTSITE_OIDC_NAME).")
    login_url = serializers.CharField(help_text="Where the button goes: GET starts the sign-in.")


class AuthOptionsSerializer(serializers.Serializer):
    registration_open = serializers.BooleanField(help_text="Whether POST /api/auth/register creates accounts.")
    password_login = serializers.BooleanField(help_text="Whether POST /api/auth/login takes passwords from everyone "
                                                        "(false: only break-glass users; the form shows SSO only).")
    sso = SsoOptionSerializer(many=True, help_text="The single sign-on providers, in the order the form shows them.")


class AuthOptionsView(APIView):
    """What a log-in form shows before anyone logs in: public, read-only, and no more than the register
    endpoint itself would tell an anonymous caller (it answers 403 `registration_closed` when closed)."""

    permission_classes = [AllowAny]
    authentication_classes: list = []

    @extend_schema(responses={200: AuthOptionsSerializer})
    def get(self, request: Request) -> Response:
        options = {"registration_open": config_get().allow_registration and password_login_on(),
                   "password_login": password_login_on(),
                   "sso": [{"id": "oidc", "name": settings.OIDC["NAME"], "login_url": "/api/auth/oidc/login"}]
                   if settings.OIDC["ISSUER"] and settings.OIDC["CLIENT_ID"] else []}
        return Response(AuthOptionsSerializer(options).data)


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
        403: OpenApiResponse(description="`password_login_disabled`: AGENTSITE_PASSWORD_LOGIN=0 and the caller is "
                                         "not break-glass (their password would sign them in nowhere)"),
        429: OpenApiResponse(description="`rate_limited`: past AGENTSITE_LOGIN_RATE_LIMIT attempts a minute for the "
                                         "user or the client address (details: retry_after; Retry-After header)")})
    def post(self, request: Request) -> Response:
        data = validated(PasswordChangeSerializer, request.data)
        if not may_use_password(request.user):
            # A password nobody can sign in with is not worth setting, and the caller already knows whether
            # they are break-glass: this tells them nothing new.
            audit("auth.password_change", outcome="refused", request=request,
                  details={"code": "password_login_disabled"}, coalesce="password_login_disabled")
            raise AppError("password_login_disabled", "Password sign-in is turned off on this server: your "
                           "password cannot be used, so it cannot be changed.", 403)
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


class MyGroupSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    role = serializers.CharField(help_text="member or manager")


class MeSerializer(UserSerializer):
    groups = MyGroupSerializer(many=True, help_text="The groups the user belongs to, with their role in each.")


class MeView(APIView):
    @extend_schema(responses={200: MeSerializer})
    def get(self, request: Request) -> Response:
        data = dict(UserSerializer(request.user).data)
        data["groups"] = [{"id": group.id, "name": group.name, "role": group.role}
                          for group in memberships(request.user.pk, fresh=True)]
        return Response(data)



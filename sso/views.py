"""The sign-in doors of single sign-on: the browser's round trip to the provider (login, callback), the hand-over
to the dashboard (session) and the sign-out that reaches the provider (logout).

Every state of a sign-in lives in the database (sso.models), so each step may land on any worker or host. The
callback answers a failure with a page saying what failed (never a token), and audits it as `auth.sso_failed`.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.loader import render_to_string
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework_simplejwt.exceptions import TokenError
from rest_framework_simplejwt.tokens import RefreshToken

from accounts import ratelimit
from accounts import services as account_services
from accounts.api import UserSerializer
from accounts.tokens import SSO_CLAIM, token_pair_for
from agentsite.core.audit import audit
from agentsite.core.errors import AppError
from agentsite.core.validation import validated
from sso import accounts
from sso.models import LOGIN_TTL, TICKET_TTL, LoginAttempt, SsoSession, Ticket
from sso.provider import REASONS, SsoFailure, provider

logger = logging.getLogger(__name__)

BROWSER_COOKIE = "agentsite_oidc"
BROWSER_COOKIE_PATH = "/api/auth/oidc/"
TICKET_COOKIE = "agentsite_sso_ticket"
TICKET_COOKIE_PATH = "/api/auth/oidc/session"
CALLBACK_PATH = "/api/auth/oidc/callback"
# Where the dashboard picks up a finished sign-in (static/agentsite/dashboard/app.js).
DASHBOARD_LANDING = "/#/sso"
# The provider's error_description is shown on the page (escaped by the template) at most this long.
ERROR_DESCRIPTION_MAX = 200
# The page's policy: no script at all, its own stylesheet only.
PAGE_CSP = "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; " \
           "frame-ancestors 'none'"


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _secure(request: HttpRequest) -> bool:
    return request.is_secure() or settings.OIDC["REDIRECT_URI"].startswith("https:")


def redirect_uri_for(request: HttpRequest) -> str:
    return settings.OIDC["REDIRECT_URI"] or request.build_absolute_uri(CALLBACK_PATH)


def origin_of(redirect_uri: str) -> str:
    parts = urlsplit(redirect_uri)
    return f"{parts.scheme}://{parts.netloc}"


def own_origin(request: HttpRequest) -> bool:
    """Whether a request is not from a page of another origin: no Origin header (browsers send one with every
    POST; a client that is not a browser holds no ticket cookie but its own), or one naming this server (its
    host as the request names it, or the origin of OIDC REDIRECT_URI behind a proxy). The scheme is not compared:
    behind a proxy ending TLS the request itself says http."""
    origin = request.META.get("HTTP_ORIGIN")
    if origin is None:
        return True
    netloc = urlsplit(origin).netloc
    return bool(netloc) and netloc in (request.get_host(), urlsplit(redirect_uri_for(request)).netloc)


def failure_page(request: HttpRequest, failure: SsoFailure) -> HttpResponse:
    """The page a failed sign-in shows, and its audit event."""
    outcome = "refused" if failure.status == 403 else "failure"
    audit("auth.sso_failed", outcome=outcome, request=request, door="sso",
          details={"reason": failure.reason, "detail": failure.detail[:300]}, coalesce=failure.reason)
    logger.info("single sign-on failed: %s", failure.reason)
    body = render_to_string("sso/error.html", {
        "reason": failure.reason, "summary": REASONS[failure.reason], "detail": failure.detail,
        "retry": failure.reason not in ("not_configured", "not_allowed", "deactivated", "no_account"),
        "name": settings.OIDC["NAME"]})
    response = HttpResponse(body, status=failure.status, content_type="text/html; charset=utf-8")
    response.is_page = True  # type: ignore[attr-defined]  # kept as HTML under /api (agentsite.middleware)
    response["Content-Security-Policy"] = PAGE_CSP
    response["Cache-Control"] = "no-store"
    if failure.retry_after is not None:
        response["Retry-After"] = str(failure.retry_after)
    return response


PAGE = "an HTML page saying what failed (`reason`: docs/api.md, Single sign-on)"
HTML = "text/html"


def _page(description: str) -> OpenApiResponse:
    return OpenApiResponse(response=OpenApiTypes.STR, description=description)


class LoginView(APIView):
    """GET /api/auth/oidc/login: a new sign-in (state, nonce, PKCE verifier), bound to this browser by a cookie,
    and the redirect to the provider. At most OIDC LOGIN_RATE_LIMIT a minute from one client address: each call
    stores a LoginAttempt, and a flood must not grow the table faster than LOGIN_TTL empties it."""

    permission_classes = [AllowAny]
    authentication_classes: list = []

    @extend_schema(request=None, responses={
        302: OpenApiResponse(description="To the identity provider's authorization endpoint."),
        (404, HTML): _page(f"`not_configured`: {PAGE}"),
        (429, HTML): _page(f"`rate_limited` (with Retry-After): {PAGE}"),
        (502, HTML): _page(f"`provider_unreachable`, `provider_invalid`: {PAGE}")})
    def get(self, request: Request) -> HttpResponse:
        return login(request._request)


class CallbackView(APIView):
    """GET /api/auth/oidc/callback: where the provider sends the browser back."""

    permission_classes = [AllowAny]
    authentication_classes: list = []

    @extend_schema(request=None, parameters=[
        OpenApiParameter("state", str, description="The state the sign-in was started with."),
        OpenApiParameter("code", str, description="The authorization code."),
        OpenApiParameter("error", str, description="The provider's refusal (then no code)."),
        OpenApiParameter("error_description", str)], responses={
        302: OpenApiResponse(description="To the dashboard (`/#/sso`), with the single-use ticket cookie."),
        (400, HTML): _page(PAGE),
        (403, HTML): _page(f"`not_allowed`, `deactivated`, `no_account`: {PAGE}"),
        (409, HTML): _page(f"`account_conflict`: {PAGE}"),
        (502, HTML): _page(f"`provider_unreachable`, `provider_invalid`: {PAGE}")})
    def get(self, request: Request) -> HttpResponse:
        return callback(request._request)


def login_rate_check(request: HttpRequest) -> None:
    """Count one sign-in started from the client's address; SsoFailure `rate_limited` (429) past the limit."""
    limit = int(settings.OIDC["LOGIN_RATE_LIMIT"])
    try:
        # accounts.ratelimit's fixed window, shared by every worker and host through the cache.
        ratelimit.oidc_login_check(ip=ratelimit.client_ip(request), limit=limit)
    except AppError as exc:
        retry_after = int(exc.details["retry_after"])
        raise SsoFailure("rate_limited", f"Try again in {retry_after} seconds.", 429, retry_after=retry_after) from exc


def login(request: HttpRequest) -> HttpResponse:
    try:
        client = provider()
        login_rate_check(request)
        redirect_uri = redirect_uri_for(request)
        state, nonce, verifier = secrets.token_urlsafe(32), secrets.token_urlsafe(32), secrets.token_urlsafe(48)
        browser = request.COOKIES.get(BROWSER_COOKIE) or ""
        if len(browser) < 32:
            browser = secrets.token_urlsafe(32)
        url = client.authorization_url(redirect_uri=redirect_uri, state=state, nonce=nonce, code_verifier=verifier)
    except SsoFailure as failure:
        return failure_page(request, failure)
    LoginAttempt.objects.filter(created_at__lt=timezone.now() - LOGIN_TTL).delete()
    LoginAttempt.objects.create(state=_digest(state), browser=_digest(browser), nonce=nonce, code_verifier=verifier,
                                redirect_uri=redirect_uri)
    response = HttpResponseRedirect(url)
    response.set_cookie(BROWSER_COOKIE, browser, max_age=int(LOGIN_TTL.total_seconds()), path=BROWSER_COOKIE_PATH,
                        httponly=True, samesite="Lax", secure=_secure(request))
    response["Cache-Control"] = "no-store"
    return response


def _attempt(request: HttpRequest) -> LoginAttempt:
    """The sign-in this callback answers, used up now (single use), or SsoFailure."""
    state = request.GET.get("state", "")
    row = LoginAttempt.objects.filter(state=_digest(state)).first() if state else None
    # Deleted before anything else: of two callbacks with one state, only the one whose delete removed the row
    # goes on.
    if row is None or LoginAttempt.objects.filter(pk=row.pk).delete()[0] != 1:
        raise SsoFailure("state_invalid", "Start the sign-in again.")
    if row.created_at < timezone.now() - LOGIN_TTL:
        raise SsoFailure("state_invalid", f"It expired after {int(LOGIN_TTL.total_seconds() // 60)} minutes.")
    browser = request.COOKIES.get(BROWSER_COOKIE, "")
    if not browser or not secrets.compare_digest(_digest(browser), row.browser):
        raise SsoFailure("browser_mismatch", "Finish the sign-in in the browser that started it.")
    return row


def callback(request: HttpRequest) -> HttpResponse:
    """Checks the answer (state, code, ID token), signs the user in, and sends the browser to the dashboard, which
    collects the tokens with POST /api/auth/oidc/session."""
    try:
        attempt = _attempt(request)
        if request.GET.get("error"):
            error = str(request.GET["error"])[:64]
            description = str(request.GET.get("error_description", ""))[:ERROR_DESCRIPTION_MAX]
            raise SsoFailure("provider_error", f"It answered {error!r}" + (f": {description}" if description else
                                                                            "") + ".", 403)
        code = request.GET.get("code", "")
        if not code:
            raise SsoFailure("provider_error", "It sent no authorization code.")
        client = provider()
        token = client.exchange(code=code, redirect_uri=attempt.redirect_uri, code_verifier=attempt.code_verifier)
        claims = client.id_claims(token["id_token"], nonce=attempt.nonce, access_token=token.get("access_token"))
        info = client.userinfo(str(token.get("access_token") or ""))
        if info and info.get("sub") != claims["sub"]:
            raise SsoFailure("provider_invalid", "Its userinfo answer is about another subject.", 502)
        user, changes = accounts.sign_in(issuer=client.issuer, claims={**info, **claims}, request=request)
    except SsoFailure as failure:
        return failure_page(request, failure)
    ticket = secrets.token_urlsafe(32)
    with transaction.atomic():
        SsoSession.objects.filter(created_at__lt=timezone.now() - settings.SIMPLE_JWT["REFRESH_TOKEN_LIFETIME"]
                                  ).delete()
        Ticket.objects.filter(created_at__lt=timezone.now() - TICKET_TTL).delete()
        session = SsoSession.objects.create(key=secrets.token_urlsafe(24), user=user, issuer=client.issuer,
                                            id_token=token["id_token"])
        Ticket.objects.create(hash=_digest(ticket), user=user, session=session)
    audit("auth.login", request=request, actor=user, door="sso", details={"method": "oidc", **changes})
    response = HttpResponseRedirect(DASHBOARD_LANDING)
    response.set_cookie(TICKET_COOKIE, ticket, max_age=int(TICKET_TTL.total_seconds()), path=TICKET_COOKIE_PATH,
                        httponly=True, samesite="Lax", secure=_secure(request))
    response["Cache-Control"] = "no-store"
    return response


class SsoResultSerializer(serializers.Serializer):
    token = serializers.CharField()
    refresh = serializers.CharField()
    user = UserSerializer()
    sso = serializers.BooleanField(help_text="Always true: the session signs out through the provider.")


class SessionView(APIView):
    """POST /api/auth/oidc/session: the dashboard collects a finished sign-in. The credential is the HttpOnly
    ticket cookie the callback set (single use, TICKET_TTL); the answer is a token pair like the log-in's."""

    permission_classes = [AllowAny]
    authentication_classes: list = []

    @extend_schema(request=None, responses={
        200: SsoResultSerializer,
        401: OpenApiResponse(description="`token_invalid`: no sign-in to collect (none, used, or expired)"),
        403: OpenApiResponse(description="`forbidden`: the request's Origin is not this server's")})
    def post(self, request: Request) -> Response:
        if not own_origin(request._request):
            # Checked before the ticket is looked at: a page of another origin of the same site (another port of
            # localhost, a sibling subdomain) gets the SameSite=Lax cookie sent, and must not use the ticket up.
            raise AppError("forbidden", "The sign-in is collected by this server's own dashboard.", 403)
        ticket = request.COOKIES.get(TICKET_COOKIE, "")
        row = Ticket.objects.select_related("user", "session").filter(hash=_digest(ticket)).first() if ticket else None
        if row is None or Ticket.objects.filter(pk=row.pk).delete()[0] != 1 \
                or row.created_at < timezone.now() - TICKET_TTL or not row.user.is_active:
            raise AppError("token_invalid", "There is no sign-in to collect (it was collected, or it expired after "
                           f"{int(TICKET_TTL.total_seconds())} s): sign in again.", 401)
        pair = token_pair_for(row.user, sso=row.session.key)
        response = Response({**pair, "user": UserSerializer(row.user).data, "sso": True})
        response.delete_cookie(TICKET_COOKIE, path=TICKET_COOKIE_PATH, samesite="Lax")
        response["Cache-Control"] = "no-store"
        return response


class LogoutInputSerializer(serializers.Serializer):
    refresh = serializers.CharField()


class LogoutResultSerializer(serializers.Serializer):
    end_session_url = serializers.CharField(allow_null=True, help_text=(
        "Where the browser goes next to end the provider's session too (its end_session_endpoint with "
        "id_token_hint and post_logout_redirect_uri); null when the provider has none, or the session was not a "
        "single sign-on one."))


class LogoutView(APIView):
    """POST /api/auth/oidc/logout: what POST /api/auth/logout does, and the provider's sign-out URL."""

    @extend_schema(request=LogoutInputSerializer, responses={200: LogoutResultSerializer})
    def post(self, request: Request) -> Response:
        data = validated(LogoutInputSerializer, request.data)
        key = _sso_key(data["refresh"])
        account_services.tokens_logout(user=request.user, refresh=data["refresh"], access=request.auth)
        session = SsoSession.objects.filter(key=key, user=request.user).first() if key else None
        url = None
        if session is not None:
            url = _end_session_url(session, request)
            session.delete()
        audit("auth.logout", request=request, details={"method": "oidc" if session else "password"})
        return Response({"end_session_url": url})


def _sso_key(refresh: str) -> str | None:
    try:
        value = RefreshToken(refresh).get(SSO_CLAIM)
    except TokenError:
        return None  # tokens_logout refuses it, naming why
    return value if isinstance(value, str) else None


def _end_session_url(session: SsoSession, request: Any) -> str | None:
    try:
        client = provider()
    except SsoFailure:
        return None
    if client.issuer != session.issuer:
        return None
    return client.end_session_url(id_token=session.id_token,
                                  post_logout_redirect_uri=origin_of(redirect_uri_for(request)) + "/")

from __future__ import annotations

from rest_framework_simplejwt.authentication import JWTAuthentication as _SimpleJWTAuthentication
from rest_framework_simplejwt.exceptions import AuthenticationFailed

from accounts.tokens import PASSWORD_CLAIM, password_version


class JWTAuthentication(_SimpleJWTAuthentication):
    """simplejwt's bearer auth, plus: the token must have been issued for the current password."""

    def get_user(self, validated_token):
        user = super().get_user(validated_token)
        if validated_token.get(PASSWORD_CLAIM) != password_version(user):
            raise AuthenticationFailed("The token was issued before a password change; log in again.",
                                       code="token_not_valid")
        return user


def bearer_token(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (the scheme case-insensitive), or None."""
    scheme, _, raw = (header or "").partition(" ")
    token = raw.strip()
    return token if scheme.lower() == "bearer" and token else None


def user_for_bearer(header: str | None):
    """The active user of an `Authorization: Bearer <jwt>` header, or None (no header, another scheme, a bad
    token). Sync: it reads the database."""
    token = bearer_token(header)
    return user_for_token(token) if token else None


def user_for_token(raw: str):
    """The active user a raw access token belongs to, or None (for non-DRF doors: /v1, /mcp)."""
    auth = JWTAuthentication()
    try:
        validated = auth.get_validated_token(raw.encode() if isinstance(raw, str) else raw)
        return auth.get_user(validated)
    except Exception:  # any invalid, expired or stale token is simply "no user"
        return None


def user_from_bearer_header(header: str | None):
    """The user of an `Authorization: Bearer <jwt>` header; raises AppError 401 otherwise (sync: DB access)."""
    from agentsite.errors import AppError

    if not header:
        raise AppError("not_authenticated", "Send Authorization: Bearer <token> (POST /api/auth/login).", 401,
                       headers={"WWW-Authenticate": 'Bearer realm="api"'})
    user = user_for_bearer(header)
    if user is None or not user.is_active:
        raise AppError("token_invalid", "The token is invalid or expired; log in again.", 401,
                       headers={"WWW-Authenticate": 'Bearer realm="api"'})
    return user


def async_post_view(handler, *, schema_view=None):
    """An async POST view under /api (the streams, and work a hang-up must cancel): other methods answer 405,
    the caller comes from the Bearer header, and every AppError before a response leaves in the envelope.
    `handler(request, user, *args, **kwargs)`; `schema_view` documents the route (drf-spectacular reads `cls`).
    """
    import functools

    from django.views.decorators.csrf import csrf_exempt

    from agentsite.dbcall import db
    from agentsite.errors import AppError, app_error_response, error_response

    @csrf_exempt
    @functools.wraps(handler)
    async def view(request, *args, **kwargs):
        if request.method != "POST":
            response = error_response("method_not_allowed", "Use POST.", 405)
            response["Allow"] = "POST, OPTIONS"
            return response
        try:
            user = await db(user_from_bearer_header, request.headers.get("Authorization"))
            return await handler(request, user, *args, **kwargs)
        except AppError as exc:
            return app_error_response(exc)

    if schema_view is not None:
        view.cls, view.initkwargs = schema_view, {}
    return view

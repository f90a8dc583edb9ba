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

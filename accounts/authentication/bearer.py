"""`Authorization: Bearer` headers for the doors outside DRF (/v1, /mcp, the async /api streams): the scheme and
token read from the header, and the caller (a dashboard token's user, or an API key within a scope) or the
401/403 that says why not."""

from __future__ import annotations

import logging
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from rest_framework_simplejwt.exceptions import AuthenticationFailed

from accounts.authentication.api_keys import _key_refused, aauthenticate_key, is_api_key, scope_problem
from accounts.authentication.jwt_auth import auser_for_token, user_for_token
from agentsite.core.errors import AppError

logger = logging.getLogger(__name__)


def bearer_scheme(header: str | None) -> bool:
    """Whether an Authorization header uses the Bearer scheme (case-insensitive), with a token or not."""
    return (header or "").strip().partition(" ")[0].lower() == "bearer"


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


async def auser_for_bearer(header: str | None):
    """`user_for_bearer` from async code."""
    token = bearer_token(header)
    return await auser_for_token(token) if token else None


def user_from_bearer_header(header: str | None):
    """The user of an `Authorization: Bearer <jwt>` header; raises AppError 401 otherwise (sync: DB access)."""
    _require_header(header)
    return _require_user(user_for_bearer(header))


async def auser_from_bearer_header(header: str | None):
    """`user_from_bearer_header` from async code: a cached user costs no database thread."""
    _require_header(header)
    return _require_user(await auser_for_bearer(header))


async def acaller_from_bearer_header(header: str | None, scope: str, where: str) -> tuple[Any, Any]:
    """(user, key or None) of an `Authorization: Bearer` header carrying a dashboard token or an API key
    whose scopes include `scope`; raises AppError 401 (no credential, a dead one) or 403 `key_scope`."""

    _require_header(header)
    raw = bearer_token(header)
    if raw is None or not is_api_key(raw):
        return _require_user(await auser_for_bearer(header)), None
    try:
        user, key = await aauthenticate_key(raw)
    except AuthenticationFailed as exc:
        raise _key_refused(exc) from exc
    problem = scope_problem(key, scope, where)
    if problem is not None:
        raise problem
    return user, key


def _require_header(header: str | None) -> None:
    # No Bearer credentials at all (none, or another scheme) is `not_authenticated`, as DRF's views answer; a
    # Bearer header whose token is missing or does not stand is `token_invalid`.
    if not bearer_scheme(header):
        raise AppError("not_authenticated", "Send Authorization: Bearer <token> (POST /api/auth/login).", 401,
                       headers={"WWW-Authenticate": 'Bearer realm="api"'})


def _require_user(user: AbstractBaseUser | None) -> AbstractBaseUser:
    if user is None or not user.is_active:
        raise AppError("token_invalid", "The token is invalid or expired; log in again.", 401,
                       headers={"WWW-Authenticate": 'Bearer realm="api"'})
    return user

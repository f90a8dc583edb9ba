"""Dashboard tokens (JWT access tokens): simplejwt's signature and expiry checks, then the user from the per-process
cache, which must be active, on the password the token was issued for, and not have revoked it (a logout).
`JWTAuthentication` is DRF's authentication class for /api (settings' REST_FRAMEWORK names it through
accounts.authentication); it takes API keys there too. Validated tokens are kept, so a repeated token skips the
signature check."""

from __future__ import annotations

import copy
import logging
import re
import threading
import time
from typing import Any

from rest_framework_simplejwt.authentication import JWTAuthentication as _SimpleJWTAuthentication
from rest_framework_simplejwt.exceptions import AuthenticationFailed, InvalidToken
from rest_framework_simplejwt.settings import api_settings

from accounts.authentication.api_keys import _key_refused, authenticate_key, is_api_key, scope_problem
from accounts.authentication.user_cache import _Entry, users
from accounts.tokens import PASSWORD_CLAIM
from agentsite.core.dbcall import db

logger = logging.getLogger(__name__)


def _checked(validated_token: Any, entry: _Entry | None) -> Any:
    """The user a validated token names, given its cache entry (read again when the token is newer than it);
    raises AuthenticationFailed."""
    if entry is not None and entry.older_than(validated_token):
        entry = users.load(_user_id(validated_token))
    return copy.copy(_stands(validated_token, entry).user)


def _stands(validated_token: Any, entry: _Entry | None) -> _Entry:
    """The entry, if the token still stands on it; raises AuthenticationFailed saying why not."""
    if entry is None:
        raise AuthenticationFailed("The token's user no longer exists.", code="user_not_found")
    if not entry.user.is_active:
        raise AuthenticationFailed("The token's user was deactivated.", code="user_inactive")
    if validated_token.get(PASSWORD_CLAIM) != entry.password_version:
        raise AuthenticationFailed("The token was issued before a password change; log in again.",
                                   code="token_not_valid")
    if validated_token.get(api_settings.JTI_CLAIM) in entry.revoked:
        raise AuthenticationFailed("The token was revoked (logged out); log in again.", code="token_not_valid")
    return entry


def _user_id(validated_token: Any) -> Any:
    try:
        return validated_token[api_settings.USER_ID_CLAIM]
    except KeyError as exc:
        raise InvalidToken("Token contained no recognizable user identification") from exc


class JWTAuthentication(_SimpleJWTAuthentication):
    """simplejwt's bearer auth, plus: the token must have been issued for the current password; the user comes
    from the per-process cache."""

    def authenticate(self, request):
        # request.api_key: the key this request came with, or None (a token, or no credential).
        django_request = getattr(request, "_request", request)  # DRF's Request wraps Django's
        django_request.api_key = None
        header = self.get_header(request)
        raw = self.get_raw_token(header) if header is not None else None
        if raw is None or not is_api_key(raw):
            return super().authenticate(request)
        try:
            user, key = authenticate_key(raw.decode("latin-1"))
        except AuthenticationFailed as exc:
            raise _key_refused(exc) from exc
        problem = scope_problem(key, "api", "/api")
        if problem is not None:
            raise problem  # 403 in the envelope (agentsite.core.errors.drf_exception_handler)
        django_request.api_key = key
        return user, key

    def get_user(self, validated_token):
        return _checked(validated_token, users.get(_user_id(validated_token)))

    def get_raw_token(self, header: bytes):
        scheme, _, rest = header.strip().partition(b" ")
        if scheme.lower() == b"bearer":  # the scheme is case-insensitive (RFC 7235), as the other doors read it
            header = b"Bearer " + rest
        return super().get_raw_token(header)

    def get_validated_token(self, raw_token: bytes):
        key = raw_token.decode("latin-1") if isinstance(raw_token, bytes) else str(raw_token)
        with _validated_lock:
            token = _validated_tokens.get(key)
        if token is not None and token.get("exp", 0) > time.time():
            return token
        token = super().get_validated_token(raw_token)  # raises InvalidToken
        with _validated_lock:
            if len(_validated_tokens) >= VALIDATED_MAX:
                del _validated_tokens[next(iter(_validated_tokens))]
            _validated_tokens[key] = token
        return token


# Tokens already validated, so a client that sends the same token again skips the signature check (a tenth
# of a small /v1 request's time). Only valid access tokens go in; a hit is re-checked for expiry; at most
# VALIDATED_MAX are kept (the oldest go first). A token's validity depends on nothing else that can change
# while the process runs (the signing key comes from the settings; the password claim is checked per use).
VALIDATED_MAX = 4096
_validated_tokens: dict[str, Any] = {}
_validated_lock = threading.Lock()


# A JWT's compact form: three base64url segments (the signature may be empty). What is not one is no token,
# without the validation's exception: an anonymous /v1 caller's placeholder key ("sk-...", "x") on every request.
_JWT_SHAPE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")


def _validated(raw: str | bytes) -> Any | None:
    """The validated access token (signature, expiry, type: CPU only), or None."""
    text = raw.decode("latin-1") if isinstance(raw, bytes) else raw
    if _JWT_SHAPE.fullmatch(text) is None:
        return None
    try:
        return JWTAuthentication().get_validated_token(raw.encode() if isinstance(raw, str) else raw)
    except Exception:  # any invalid or expired token is simply "no token"
        return None


def is_token_shaped(raw: str | None) -> bool:
    """Whether a credential has a JWT's compact form: then /v1 checks it as a dashboard token, and one that does not
    stand (a bad signature, `alg: none`, expired, a refresh token, logged out) is refused, never taken for an
    anonymous placeholder ("sk-...", "x")."""
    return bool(raw) and _JWT_SHAPE.fullmatch(raw) is not None  # type: ignore[arg-type]


async def aauthenticate_token(raw: str) -> tuple[Any, Any]:
    """(user, validated access token) of a raw dashboard token; raises InvalidToken (a bad signature or type,
    expired) or AuthenticationFailed (logged out, a password change, the user inactive or deleted). A cached
    user costs no database thread."""
    validated = JWTAuthentication().get_validated_token(raw.encode())
    return await _achecked(validated), validated


def user_for_token(raw: str):
    """The active user a raw access token belongs to, or None (for non-DRF doors: /v1, /mcp). Sync."""
    validated = _validated(raw)
    if validated is None:
        return None
    try:
        return _checked(validated, users.get(_user_id(validated)))
    except Exception:  # a stale or orphaned token is simply "no user"
        return None


async def auser_for_token(raw: str):
    """`user_for_token` from async code: a cached user costs no database thread."""
    validated = _validated(raw)
    if validated is None:
        return None
    try:
        return await _achecked(validated)
    except Exception:  # a stale or orphaned token is simply "no user"
        return None


async def _achecked(validated_token: Any) -> Any:
    """`_checked` from async code."""
    return copy.copy((await _astands(validated_token)).user)


async def _astands(validated_token: Any) -> _Entry:
    """`_stands` from async code, the entry from the cache (a miss loads it on a database thread)."""
    user_id = _user_id(validated_token)
    hit, entry = users.fresh(user_id)
    if not hit:
        entry = await db(users.load, user_id)
    elif entry is not None and entry.older_than(validated_token):  # a password changed in another process
        entry = await db(users.load, user_id)
    return _stands(validated_token, entry)

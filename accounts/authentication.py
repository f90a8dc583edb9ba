"""Bearer-token authentication: simplejwt's signature and expiry checks, the password claim, and the users
that tokens name cached per process.

Every request with a token needs its user (active? admin? the password the token was issued for?). Reading
the row each time cost a query and, from async views, a crossing to a database thread: about a tenth of a
`/v1` request's server time. `UserCache` keeps each user's row per process instead:

- an entry is dropped at once, in every process, when the user is saved or deleted (`post_save`/`post_delete`
  -> `agentsite.core.invalidation`, which reaches the other processes through Redis when `REDIS_URL` is set),
  so a password change, a deactivation or a lost admin flag stops the old token at once;
- an entry lives at most `AGENTSITE_AUTH_CACHE_S` (2 s), which bounds a change no announcement reaches (the
  embedded default has no Redis: `manage.py changepassword` in another process; a queryset `update()`);
- a load that raced a drop is not stored (a generation counter), so a drop is never undone by an older read;
- callers get a copy of the cached row, never the row itself, so a request that changes its user (a password
  change) changes nothing another request sees;
- an entry holds the user's revoked access tokens (`RevokedAccessToken`, written by a logout, which announces
  the user), so a logged-out token stops in every process at once, as a password change does.

Long responses (the chat, workflow and /v1 streams, /mcp) were authenticated once, when they opened: `revocable`
checks their credential again before each event they send (`credential_problem`), so the stream of a token
that a logout or a password change revoked, or of a user deactivated or deleted, ends at its next event with
an error event in its own format (agentsite.core.sse). A token that merely expires mid-stream is not cut: it was
valid when the stream opened, and an MCP client cannot change the header of a stream it holds.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from rest_framework_simplejwt.authentication import JWTAuthentication as _SimpleJWTAuthentication
from rest_framework_simplejwt.exceptions import AuthenticationFailed, InvalidToken
from rest_framework_simplejwt.settings import api_settings

from accounts.tokens import PASSWORD_CLAIM, password_version

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

    from agentsite.core.errors import AppError


@dataclass(frozen=True)
class _Entry:
    user: AbstractBaseUser  # the row as read; handed out only as copies
    password_version: str
    expires: float
    revoked: frozenset[str] = frozenset()  # the jti of each unexpired revoked access token of the user


class UserCache:
    """The users tokens name, per process (see the module docstring for the invariants)."""

    TOPIC = "user"

    def __init__(self) -> None:
        self._entries: dict[str, _Entry | None] = {}  # None: no such user (cached too, as briefly)
        self._lock = threading.Lock()
        self._generation = 0

    @staticmethod
    def ttl() -> float:
        return float(getattr(settings, "AGENTSITE_AUTH_CACHE_S", 2.0))

    def fresh(self, user_id: object) -> tuple[bool, _Entry | None]:
        """(hit, entry) without touching the database: a miss is (False, None)."""
        key = str(user_id)
        with self._lock:
            if key not in self._entries:
                return False, None
            entry = self._entries[key]
        if entry is not None and entry.expires < time.monotonic():
            return False, None
        return True, entry

    def load(self, user_id: object) -> _Entry | None:
        """Read the user's row (sync: the database) and cache it, unless a drop came in meanwhile."""
        from agentsite.core import invalidation

        invalidation.listen()
        key = str(user_id)
        with self._lock:
            generation = self._generation
        user = get_user_model().objects.filter(**{api_settings.USER_ID_FIELD: user_id}).first()
        entry = None if user is None else _Entry(user, password_version(user), time.monotonic() + self.ttl(),
                                                 _revoked_jtis(user))
        with self._lock:
            if generation == self._generation:
                self._entries[key] = entry
        return entry

    def get(self, user_id: object) -> _Entry | None:
        hit, entry = self.fresh(user_id)
        return entry if hit else self.load(user_id)

    def drop(self, key: str | None) -> None:
        with self._lock:
            self._generation += 1
            if key is None:
                self._entries.clear()
            else:
                self._entries.pop(str(key), None)


users = UserCache()


def _revoked_jtis(user: AbstractBaseUser) -> frozenset[str]:
    from django.utils import timezone

    from accounts.models import RevokedAccessToken

    rows = RevokedAccessToken.objects.filter(user=user, expires_at__gt=timezone.now())
    return frozenset(rows.values_list("jti", flat=True))


def _checked(validated_token: Any, entry: _Entry | None) -> Any:
    """The user a validated token names, given its cache entry; raises AuthenticationFailed."""
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


def _validated(raw: str | bytes) -> Any | None:
    """The validated access token (signature, expiry, type: CPU only), or None."""
    try:
        return JWTAuthentication().get_validated_token(raw.encode() if isinstance(raw, str) else raw)
    except Exception:  # any invalid or expired token is simply "no token"
        return None


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
        from agentsite.core.dbcall import db

        entry = await db(users.load, user_id)
    return _stands(validated_token, entry)


def credential_of(header: str | None) -> Any | None:
    """The validated access token of an `Authorization: Bearer` header (CPU only), or None."""
    raw = bearer_token(header)
    return _validated(raw) if raw else None


async def credential_problem(validated_token: Any) -> AppError | None:
    """None while a validated access token still stands: its user exists and is active, and neither a password
    change nor a logout revoked it. Otherwise the AppError 401 `token_invalid` that says which. Expiry is not
    checked (see the module docstring). A cached user costs no database thread."""
    from agentsite.core.errors import AppError

    try:
        await _astands(validated_token)  # no copy of the user: this runs before every event of a stream
    except (AuthenticationFailed, InvalidToken) as exc:
        detail = exc.detail.get("detail") if isinstance(exc.detail, dict) else exc.detail  # simplejwt's are dicts
        return AppError("token_invalid", str(detail or "The token is invalid; log in again."), 401)
    return None


def revocable(stream: AsyncIterator[bytes], header: str | None,
              error_event: Callable[[AppError], bytes] | None = None) -> AsyncIterator[bytes]:
    """`stream` (a response's SSE events), ended at its next event with `error_event` (default: the API's
    `error {code, message}` event) once the bearer credential of `header` no longer stands. Call it with the
    header the stream was authenticated with; without a valid token (a public /v1 call), `stream` as is."""
    from agentsite.core import sse

    token = credential_of(header)
    if token is None:
        return stream
    return sse.ended_when(stream, lambda: credential_problem(token), error_event or sse.error_event)


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


def _require_header(header: str | None) -> None:
    from agentsite.core.errors import AppError

    # No Bearer credentials at all (none, or another scheme) is `not_authenticated`, as DRF's views answer; a
    # Bearer header whose token is missing or does not stand is `token_invalid`.
    if not bearer_scheme(header):
        raise AppError("not_authenticated", "Send Authorization: Bearer <token> (POST /api/auth/login).", 401,
                       headers={"WWW-Authenticate": 'Bearer realm="api"'})


def _require_user(user: AbstractBaseUser | None) -> AbstractBaseUser:
    from agentsite.core.errors import AppError

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

    from django.http import HttpResponse
    from django.views.decorators.csrf import csrf_exempt

    from agentsite.core.errors import AppError, app_error_response, error_response

    @csrf_exempt
    @functools.wraps(handler)
    async def view(request, *args, **kwargs):
        # As DRF's views do: the caller first (401 before 405), then the method; OPTIONS says what is allowed.
        try:
            user = await auser_from_bearer_header(request.headers.get("Authorization"))
            if request.method == "POST":
                return await handler(request, user, *args, **kwargs)
        except AppError as exc:
            return app_error_response(exc)
        if request.method == "OPTIONS":
            response = HttpResponse(status=200)
        else:
            response = error_response("method_not_allowed", "Use POST.", 405)
        response["Allow"] = "POST, OPTIONS"
        return response

    if schema_view is not None:
        view.cls, view.initkwargs = schema_view, {}
    return view

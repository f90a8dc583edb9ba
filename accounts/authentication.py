"""Bearer-token authentication: simplejwt's signature and expiry checks, the password claim, and the users
that tokens name cached per process.

Every request with a token needs its user (active? admin? the password the token was issued for?). Reading
the row each time cost a query and, from async views, a crossing to a database thread: about a tenth of a
`/v1` request's server time. `UserCache` keeps each user's row per process instead:

- an entry is dropped at once, in every process, when the user is saved or deleted (`post_save`/`post_delete`
  -> `agentsite.core.invalidation`, which reaches the other processes through Redis when `REDIS_URL` is set, or
  on SQLite through the host's channel), so a password change, a deactivation or a lost admin flag stops the
  old token at once;
- an entry lives at most `AGENTSITE_AUTH_CACHE_S` (2 s), connected or not, which bounds a change no
  announcement reaches (a queryset `update()`; any change in another process on PostgreSQL without Redis);
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

API keys (accounts.models.ApiKey, issue 27) are the other credential: `ask-<random>`, sent as
`Authorization: Bearer <key>` on every door and as `x-api-key` on /v1, and checked by one function
(`key_problem`) whatever header carried them. `KeyCache` keeps each key's row per process with the same
invariants as `UserCache` (dropped in every process when the key is saved or deleted, topic `apikey`; a 2 s time
to live; a load that raced a drop not stored), and a key stands only while its user's entry (from `users`)
does: the user exists and is active and the password is the one the key was made under. A key is found by the
SHA-256 of the secret and that digest is compared with `hmac.compare_digest`. Unlike a dashboard token, a key's
expiry also ends a stream open with it (its owner chose the date, and nothing refreshes a key). A key without
the `admin` scope acts as its user stripped of admin rights (`is_staff`, `is_superuser` false on the copy that
requests see), so no admin check anywhere passes with it. `last_used_at` is written at most once a minute per
key per process, by a thread off the request path (`LastUsed`); a process killed loses at most that minute.

Every door exposes the key a request was authenticated with as `request.api_key` (a copy of the ApiKey row;
None for a dashboard token or no credential): DRF views under /api (set by `JWTAuthentication.authenticate`),
the async /api streams (`async_post_view`), /v1 (compat.api) and /mcp (`scope["api_key"]`, which the MCP SDK's
request object carries as `request.scope["api_key"]`).
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import logging
import os
import re
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
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

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Entry:
    user: AbstractBaseUser  # the row as read; handed out only as copies
    password_version: str
    expires: float
    revoked: frozenset[str] = frozenset()  # the jti of each unexpired revoked access token of the user
    loaded_at: float = field(default_factory=time.time)  # wall clock, comparable with a token's `iat`

    def older_than(self, validated_token: Any) -> bool:
        """Whether the token was issued after this entry was read, naming another password version: the
        password changed in another process within the cache's lifetime, so the entry, not the token, is
        stale. (A token older than the entry that names another version is simply stale.)"""
        issued = validated_token.get("iat")
        return (validated_token.get(PASSWORD_CLAIM) != self.password_version and isinstance(issued, (int, float))
                and issued >= self.loaded_at - 1)


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


# --- API keys ---------------------------------------------------------------------------------------

KEY_PREFIX = "ask-"


def is_api_key(raw: str | bytes | None) -> bool:
    """Whether a credential is shaped as an API key (`ask-...`): then it is checked as one, never as anything
    else (a dead key is refused, not taken for an anonymous placeholder)."""
    if isinstance(raw, bytes):
        return raw.startswith(KEY_PREFIX.encode())
    return bool(raw) and raw.startswith(KEY_PREFIX)  # type: ignore[union-attr]


def key_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class _KeyEntry:
    key: Any  # the ApiKey row as read; handed out only as copies
    not_after: float | None  # the key's expires_at as a Unix time
    expires: float  # this entry's time to live (monotonic)


class KeyCache:
    """The API keys requests name, per process, by the SHA-256 of their secret (see the module docstring)."""

    TOPIC = "apikey"
    MAX = 10_000  # entries (unknown digests included, so random keys cannot grow it without bound)

    def __init__(self) -> None:
        self._entries: dict[str, _KeyEntry | None] = {}
        self._expiry: dict[str, float] = {}
        self._lock = threading.Lock()
        self._generation = 0

    def fresh(self, digest: str) -> tuple[bool, _KeyEntry | None]:
        with self._lock:
            if digest not in self._entries:
                return False, None
            entry, expires = self._entries[digest], self._expiry[digest]
        if expires < time.monotonic():
            return False, None
        return True, entry

    def load(self, digest: str) -> _KeyEntry | None:
        """Read the key's row (sync: the database) and cache it, unless a drop came in meanwhile."""
        from accounts.models import ApiKey
        from agentsite.core import invalidation

        invalidation.listen()
        with self._lock:
            generation = self._generation
        key = ApiKey.objects.filter(hash=digest).first()
        expires = time.monotonic() + UserCache.ttl()
        entry = None if key is None else _KeyEntry(
            key, key.expires_at.timestamp() if key.expires_at else None, expires)
        with self._lock:
            if generation == self._generation:
                if digest not in self._entries and len(self._entries) >= self.MAX:
                    oldest = next(iter(self._entries))
                    del self._entries[oldest], self._expiry[oldest]
                self._entries[digest], self._expiry[digest] = entry, expires
        return entry

    def get(self, digest: str) -> _KeyEntry | None:
        hit, entry = self.fresh(digest)
        return entry if hit else self.load(digest)

    def drop(self, digest: str | None) -> None:
        with self._lock:
            self._generation += 1
            if digest is None:
                self._entries.clear()
                self._expiry.clear()
            else:
                self._entries.pop(digest, None)
                self._expiry.pop(digest, None)


keys = KeyCache()


@dataclass(frozen=True)
class KeyCredential:
    """An API key as a request presented it: only its digest is kept."""

    digest: str


def _key_stands(digest: str, entry: _KeyEntry | None, user_entry: _Entry | None) -> None:
    """Raises AuthenticationFailed saying why the key does not stand (see the module docstring)."""
    if entry is None or not hmac.compare_digest(entry.key.hash, digest):
        raise AuthenticationFailed("The API key is not known.", code="token_not_valid")
    if entry.key.revoked:
        raise AuthenticationFailed("The API key was revoked.", code="token_not_valid")
    if entry.not_after is not None and entry.not_after <= time.time():
        raise AuthenticationFailed("The API key expired.", code="token_not_valid")
    if user_entry is None:
        raise AuthenticationFailed("The API key's user no longer exists.", code="user_not_found")
    if not user_entry.user.is_active:
        raise AuthenticationFailed("The API key's user was deactivated.", code="user_inactive")
    if not hmac.compare_digest(entry.key.password_version, user_entry.password_version):
        raise AuthenticationFailed("The API key was made before its user's password changed; make a new one.",
                                   code="token_not_valid")


def _key_user(entry: _KeyEntry, user_entry: _Entry) -> tuple[Any, Any]:
    """(user, key) copies for a request: without the `admin` scope, the user is stripped of admin rights."""
    user = copy.copy(user_entry.user)
    if "admin" not in entry.key.scopes:
        user.is_staff = user.is_superuser = False
    last_used.touch(entry.key.pk)
    return user, copy.copy(entry.key)


def authenticate_key(secret: str) -> tuple[Any, Any]:
    """(user, key) of a live API key, whatever its scopes (sync: a miss reads the database); raises
    AuthenticationFailed."""
    digest = key_digest(secret)
    entry = keys.get(digest)
    user_entry = users.get(entry.key.user_id) if entry is not None else None
    _key_stands(digest, entry, user_entry)
    assert entry is not None and user_entry is not None
    return _key_user(entry, user_entry)


async def aauthenticate_key(secret: str) -> tuple[Any, Any]:
    """`authenticate_key` from async code: a cached key and user cost no database thread."""
    digest = key_digest(secret)
    entry, user_entry = await _akey_entries(digest)
    _key_stands(digest, entry, user_entry)
    assert entry is not None and user_entry is not None
    return _key_user(entry, user_entry)


async def _akey_entries(digest: str) -> tuple[_KeyEntry | None, _Entry | None]:
    hit, entry = keys.fresh(digest)
    if not hit:
        from agentsite.core.dbcall import db

        entry = await db(keys.load, digest)
    if entry is None:
        return None, None
    hit, user_entry = users.fresh(entry.key.user_id)
    if not hit:
        from agentsite.core.dbcall import db

        user_entry = await db(users.load, entry.key.user_id)
    return entry, user_entry


def scope_problem(key: Any, scope: str, where: str) -> AppError | None:
    """The 403 `key_scope` for a key used outside its scopes (None for no key, or one in scope)."""
    from agentsite.core.errors import AppError

    if key is None or scope in key.scopes:
        return None
    from agentsite.core.audit import audit

    audit("key.scope_refused", outcome="refused", door="key", target=f"key:{key.pk}",
          details={"scope": scope, "where": where, "owner_id": key.user_id}, coalesce="key_scope")
    return AppError("key_scope", f"This API key may not be used on {where}: its scopes are "
                    f"{', '.join(key.scopes) or 'none'}; it needs '{scope}'.", 403)


class LastUsed:
    """`last_used_at` of the keys in use, written off the request path: `touch` costs a dict lookup, and at most
    once a minute per key (per process) hands the time to a thread that writes it (a queryset update: no
    signal, so no cache is dropped)."""

    INTERVAL_S = 60.0

    def __init__(self) -> None:
        self._touched: dict[int, float] = {}  # key id -> monotonic time last handed to the writer
        self._pending: dict[int, float] = {}  # key id -> Unix time to write
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: tuple[int, threading.Thread] | None = None

    def touch(self, key_id: int) -> None:
        now = time.monotonic()
        last = self._touched.get(key_id)
        if last is not None and now - last < self.INTERVAL_S:
            return
        with self._lock:
            self._touched[key_id] = now
            self._pending[key_id] = time.time()
            if self._thread is None or self._thread[0] != os.getpid() or not self._thread[1].is_alive():
                thread = threading.Thread(target=self._run, name="agentsite-key-last-used", daemon=True)
                self._thread = (os.getpid(), thread)
                thread.start()
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            self.flush()

    def flush(self) -> None:
        """Write what is pending (sync: the database)."""
        from datetime import UTC, datetime

        from django.db import close_old_connections, connection

        from accounts.models import ApiKey

        with self._lock:
            pending, self._pending = self._pending, {}
        try:
            close_old_connections()
            for key_id, at in pending.items():
                ApiKey.objects.filter(pk=key_id).update(last_used_at=datetime.fromtimestamp(at, UTC))
        except Exception:  # noqa: BLE001 - a missed last_used_at must never fail anything
            logger.warning("Could not record when API keys were last used", exc_info=True)
        finally:
            connection.close()


last_used = LastUsed()


def _revoked_jtis(user: AbstractBaseUser) -> frozenset[str]:
    from django.utils import timezone

    from accounts.models import RevokedAccessToken

    rows = RevokedAccessToken.objects.filter(user=user, expires_at__gt=timezone.now())
    return frozenset(rows.values_list("jti", flat=True))


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
    elif entry is not None and entry.older_than(validated_token):  # a password changed in another process
        from agentsite.core.dbcall import db

        entry = await db(users.load, user_id)
    return _stands(validated_token, entry)


def credential_of(header: str | None) -> Any | None:
    """The credential of an `Authorization: Bearer` header: an API key's `KeyCredential`, or the validated
    access token (CPU only), or None."""
    raw = bearer_token(header)
    if raw and is_api_key(raw):
        return KeyCredential(key_digest(raw))
    return _validated(raw) if raw else None


async def credential_problem(credential: Any) -> AppError | None:
    """None while a credential (from `credential_of`) still stands: for a token, its user exists and is
    active, and neither a password change nor a logout revoked it; for an API key, `key_problem`'s checks
    (expiry included). Otherwise the AppError 401 `token_invalid` that says which. A token's expiry is not
    checked (see the module docstring). Cached entries cost no database thread."""
    from agentsite.core.errors import AppError

    try:
        if isinstance(credential, KeyCredential):
            entry, user_entry = await _akey_entries(credential.digest)
            _key_stands(credential.digest, entry, user_entry)
        else:
            await _astands(credential)  # no copy of the user: this runs before every event of a stream
    except (AuthenticationFailed, InvalidToken) as exc:
        detail = exc.detail.get("detail") if isinstance(exc.detail, dict) else exc.detail  # simplejwt's are dicts
        return AppError("token_invalid", str(detail or "The token is invalid; log in again."), 401)
    return None


def revocable(stream: AsyncIterator[bytes], header: str | None,
              error_event: Callable[[AppError], bytes] | None = None, *,
              credential: Any | None = None) -> AsyncIterator[bytes]:
    """`stream` (a response's SSE events), ended at its next event with `error_event` (default: the API's
    `error {code, message}` event) once the bearer credential of `header` (or `credential`, from
    `credential_of` or a `KeyCredential`: an x-api-key) no longer stands. Call it with the header the stream
    was authenticated with; without a credential (an anonymous /v1 call), `stream` as is."""
    from agentsite.core import sse

    token = credential if credential is not None else credential_of(header)
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


def _key_refused(exc: AuthenticationFailed) -> AppError:
    from agentsite.core.errors import AppError

    return AppError("token_invalid", failure_detail(exc), 401, headers={"WWW-Authenticate": 'Bearer realm="api"'})


def failure_detail(exc: AuthenticationFailed | InvalidToken) -> str:
    detail = exc.detail.get("detail") if isinstance(exc.detail, dict) else exc.detail  # simplejwt's are dicts
    return str(detail or "The credential is invalid.")


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
        request.api_key = None
        try:
            user, request.api_key = await acaller_from_bearer_header(request.headers.get("Authorization"), "api",
                                                                    "/api")
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

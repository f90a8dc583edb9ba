"""API keys (`ask-<random>`, accounts.models.ApiKey) as credentials: found by the SHA-256 of the secret, cached per
process (`keys`, dropped in every process when a key is saved or deleted), and standing only while the key is
live and its user's entry (accounts.authentication.user_cache) is: active, on the password the key was made
under. A key without the `admin` scope acts as its user stripped of admin rights."""

from __future__ import annotations

import copy
import hashlib
import hmac
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from rest_framework_simplejwt.exceptions import AuthenticationFailed, InvalidToken

from accounts.authentication.key_last_used import last_used
from accounts.authentication.user_cache import _Entry, users
from accounts.models import ApiKey
from agentsite.core import invalidation, usercaches
from agentsite.core.audit import audit
from agentsite.core.dbcall import db
from agentsite.core.errors import AppError

logger = logging.getLogger(__name__)


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
    """The API keys requests name, per process, by the SHA-256 of their secret (see the module docstring).
    Subclasses cache other hashed credentials alike (`row`, `TOPIC`)."""

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
        invalidation.listen()
        with self._lock:
            generation = self._generation
        key = self.row(digest)
        expires = time.monotonic() + usercaches.ttl()  # a key lives as its user does
        entry = None if key is None else _KeyEntry(
            key, key.expires_at.timestamp() if key.expires_at else None, expires)
        with self._lock:
            if generation == self._generation:
                if digest not in self._entries and len(self._entries) >= self.MAX:
                    oldest = next(iter(self._entries))
                    del self._entries[oldest], self._expiry[oldest]
                self._entries[digest], self._expiry[digest] = entry, expires
        return entry

    def row(self, digest: str) -> Any:
        """The row a digest names, or None (sync: the database). A subclass caching another credential's rows
        (oauth.tokens) names its own; each row has `user_id` and `expires_at`."""
        return ApiKey.objects.filter(hash=digest).first()

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
        # The key and its user were cached together and lapse together: both read on one database thread trip.
        return await db(_load_entries, digest)
    if entry is None:
        return None, None
    hit, user_entry = users.fresh(entry.key.user_id)
    if not hit:
        user_entry = await db(users.load, entry.key.user_id)
    return entry, user_entry


def _load_entries(digest: str) -> tuple[_KeyEntry | None, _Entry | None]:
    """The key's entry read again, and its user's (from the cache while fresh), on the caller's thread."""
    entry = keys.load(digest)
    if entry is None:
        return None, None
    return entry, users.get(entry.key.user_id)


def scope_problem(key: Any, scope: str, where: str) -> AppError | None:
    """The 403 `key_scope` for a key used outside its scopes (None for no key, or one in scope)."""
    if key is None or scope in key.scopes:
        return None
    audit("key.scope_refused", outcome="refused", door="key", target=f"key:{key.pk}",
          details={"scope": scope, "where": where, "owner_id": key.user_id}, coalesce="key_scope")
    return AppError("key_scope", f"This API key may not be used on {where}: its scopes are "
                    f"{', '.join(key.scopes) or 'none'}; it needs '{scope}'.", 403)


def _key_refused(exc: AuthenticationFailed) -> AppError:
    return AppError("token_invalid", failure_detail(exc), 401, headers={"WWW-Authenticate": 'Bearer realm="api"'})


def failure_detail(exc: AuthenticationFailed | InvalidToken) -> str:
    detail = exc.detail.get("detail") if isinstance(exc.detail, dict) else exc.detail  # simplejwt's are dicts
    return str(detail or "The credential is invalid.")

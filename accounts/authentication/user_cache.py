"""The users that tokens and keys name, cached per process (`users`): a request needs its user (active? admin?
the password the token was issued for? its revoked tokens?) without a query each time.

An entry is dropped at once in every process when the user is saved or deleted (accounts.apps announces it
through agentsite.core.invalidation), is not stored when a drop raced its load (a generation counter), and holds
the user's unexpired revoked access tokens (a logout announces the user), so a password change, a deactivation or
a logout stops a credential in every process at once. Only a change no announcement carries (raw SQL, a queryset
`update()`) waits for an entry's life (usercaches.ttl: AGENTSITE_AUTH_CACHE_S, or a minute while this process hears
the channel; losing the channel drops every entry, so a longer life never outlasts the hearing).

The caches other apps keep per user are read right after a user (agentsite.core.usercaches).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone
from rest_framework_simplejwt.settings import api_settings

from accounts.models import RevokedAccessToken
from accounts.tokens import PASSWORD_CLAIM, password_version
from agentsite.core import invalidation, usercaches

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
        invalidation.listen()
        key = str(user_id)
        with self._lock:
            generation = self._generation
        user = get_user_model().objects.filter(**{api_settings.USER_ID_FIELD: user_id}).first()
        entry = None if user is None else _Entry(user, password_version(user), time.monotonic() + usercaches.ttl(),
                                                 _revoked_jtis(user))
        with self._lock:
            if generation == self._generation:
                self._entries[key] = entry
        if user is not None:
            usercaches.read_with_user(user.pk)
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
    rows = RevokedAccessToken.objects.filter(user=user, expires_at__gt=timezone.now())
    return frozenset(rows.values_list("jti", flat=True))

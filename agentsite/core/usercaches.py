"""Caches kept per user by other apps that a request asks right after authenticating its user (the memberships,
the budgets): each registers its loader here (`with_user`), and the users' cache (accounts) runs them all right
after it reads a user, on the same thread (`read_with_user`). A request whose caches have all lapsed then crosses
to a database thread once, not once per cache.

`ttl()` is the life of a user's entry (accounts), of an API key's, and of the memberships kept with them:
AGENTSITE_AUTH_CACHE_S, or a minute while this process hears every announced change (invalidation.ttl), since
then only a change no announcement carries (raw SQL, a queryset `update()`) waits for it; 0 keeps nothing.

Contract: a loader (sync, user id -> anything) reads only what its own cache no longer holds; its failure is
logged and left there, since its cache's own caller asks again and fails its own way. Loaders run only where
invalidation announcements arrive: elsewhere those caches keep nothing, and their callers read anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings

from agentsite.core import invalidation

logger = logging.getLogger(__name__)


def ttl() -> float:
    """The life of an entry loaded now in a per-user cache (the module docstring)."""
    base = float(getattr(settings, "AGENTSITE_AUTH_CACHE_S", 2.0))
    return invalidation.ttl(base) if base > 0 else 0.0

_loaders: list[Callable[[int], object]] = []


def with_user(loader: Callable[[int], object]) -> None:
    """Have `loader(user_id)` run whenever the users' cache reads a user. Registered once, in an app's ready()."""
    if loader not in _loaders:
        _loaders.append(loader)


def read_with_user(user_id: int) -> None:
    """Run the registered loaders for a user just read (sync: they may read the database); never raises."""
    if not invalidation.connected():
        return
    for loader in _loaders:
        try:
            loader(user_id)
        except Exception as exc:  # a boundary: the loader's own caller reads again and handles the failure
            logger.warning("Reading %s for user %s with the user failed (%s); it is read when asked",
                           getattr(loader, "__qualname__", loader), user_id, exc)

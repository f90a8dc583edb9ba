"""Reads of the organisation: groups, members, and each user's memberships (cached per process).

`memberships(user_id)` is what a model-access or a budget check asks on every LLM call, so it is cached per
process like the users tokens name: an entry is dropped at once in every process when a membership of the user
changes or a group changes (`TOPIC`, announced by organisation.apps after commit), lives at most as long as a
user's entry otherwise (usercaches.ttl: only a change no announcement carries waits for it), is not stored when a
drop raced its load, and is not kept at all where no announcement can arrive (PostgreSQL without Redis). Access
decisions do not use it: `organisation.policy` asks the database, one indexed query.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db.models import Count, QuerySet

from agentsite.core import invalidation, usercaches
from agentsite.core.errors import AppError
from organisation.models import MANAGER, Group, Membership

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

TOPIC = "org.membership"  # key: a user id, or None when a group itself changed (its name, its models)


@dataclass(frozen=True)
class GroupOfUser:
    id: int
    name: str
    role: str
    models: tuple[str, ...] | None  # the group's model list; None: no restriction


class _MembershipCache:
    def __init__(self) -> None:
        self._entries: dict[str, tuple[float, tuple[GroupOfUser, ...]]] = {}
        self._lock = threading.Lock()
        self._generation = 0

    def get(self, user_id: int) -> tuple[GroupOfUser, ...]:
        key = str(user_id)
        with self._lock:
            hit = self._entries.get(key)
            generation = self._generation
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        invalidation.listen()
        groups = _read(user_id)
        ttl = usercaches.ttl()
        with self._lock:
            # Kept only while announcements reach this process: PostgreSQL without Redis has no channel, and a
            # removed member must lose their groups on the next request, whichever process takes it.
            if generation == self._generation and invalidation.connected():
                self._entries[key] = (time.monotonic() + ttl, groups)
        return groups

    def peek(self, user_id: int) -> tuple[GroupOfUser, ...] | None:
        """The cached entry while fresh, else None (no query: an async caller then asks get() on a thread)."""
        with self._lock:
            hit = self._entries.get(str(user_id))
        return hit[1] if hit is not None and hit[0] > time.monotonic() else None

    def drop(self, key: str | None) -> None:
        with self._lock:
            self._generation += 1
            if key is None:
                self._entries.clear()
            else:
                self._entries.pop(str(key), None)


def _read(user_id: int) -> tuple[GroupOfUser, ...]:
    rows = Membership.objects.filter(user_id=user_id).select_related("group").order_by("group__name")
    return tuple(GroupOfUser(row.group_id, row.group.name, row.role,
                             None if row.group.allowed_models is None else tuple(row.group.allowed_models))
                 for row in rows)


_cache = _MembershipCache()


def memberships(user_id: int | None, *, fresh: bool = False) -> tuple[GroupOfUser, ...]:
    """The user's groups with their role in each and each group's model list (sync: may read the database).
    Cached (see the module docstring) unless `fresh`: what a client is shown reads the database."""
    if user_id is None:
        return ()
    return _read(user_id) if fresh else _cache.get(user_id)


def memberships_peek(user_id: int) -> tuple[GroupOfUser, ...] | None:
    """memberships() when this process holds them fresh, else None; never queries (safe on the event loop)."""
    return _cache.peek(user_id)


def drop(key: str | None) -> None:
    _cache.drop(key)


def group_queryset() -> QuerySet[Group]:
    return Group.objects.annotate(members_count=Count("memberships"))


def group_list_for(user: AbstractBaseUser) -> QuerySet[Group]:
    """Every group for an admin; the groups a user belongs to otherwise."""
    groups = group_queryset()
    return groups if user.is_staff else groups.filter(memberships__user_id=user.pk)


def group_get_for(user: AbstractBaseUser, group_id: str) -> Group:
    """A group the user may read (an admin: any; others: theirs); another or a missing one is 404."""
    group = group_list_for(user).filter(pk=group_id).first() if group_id else None
    if group is None:
        raise AppError("not_found", "No group with that id.", 404)
    return group


def manages(user: AbstractBaseUser, group: Group) -> bool:
    """Whether the user manages the group's members: an admin, or the group's manager."""
    return bool(user.is_staff) or Membership.objects.filter(group=group, user_id=user.pk, role=MANAGER).exists()


def member_list(group: Group) -> QuerySet[Membership]:
    return Membership.objects.filter(group=group).select_related("user").order_by("user__username")

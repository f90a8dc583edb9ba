"""Answers kept per process and dropped in every process when what they were read from changes.

`Kept(topic, load, ttl=...)` keeps `load(key)` per key, but only while this process hears the invalidation
channel (invalidation.connected()); elsewhere every `get` loads. The code that changes what an answer was read
from calls `changed(key)` (None: every key): dropped here at once, announced to every process once committed;
`follows(model)` makes every save and delete of a model's row call it (the admin's and the shell's too).

Invariants: a load that raced a drop (of its key or of all) is returned but not kept, by a generation counter;
an answer lapses after `ttl` seconds all the same (a change no signal saw: a bulk write); at most `max_entries`
answers, the oldest dropped first; a key is kept as its str(), as announcements carry it. `load` runs on the
caller's thread and may read the database (sync).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from django.db import transaction
from django.db.models import Model
from django.db.models.signals import post_delete, post_save

from agentsite.core import invalidation

V = TypeVar("V")


class Kept(Generic[V]):
    def __init__(self, topic: str, load: Callable[[Hashable], V], *, ttl: float, max_entries: int = 10_000) -> None:
        self.topic, self.ttl, self.max_entries = topic, ttl, max_entries
        self._load = load
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[V, float]] = {}  # str(key) -> (answer, monotonic expiry)
        self._generation = 0
        invalidation.subscribe(topic, self.drop)

    def get(self, key: Hashable = None) -> V:
        """The kept answer for `key` while it is fresh, else load(key) (kept when nothing dropped it meanwhile).
        As every cache of invalidation's, it starts the listener before a load, not on each hit."""
        keep = invalidation.connected()
        name = str(key)
        with self._lock:
            entry = self._entries.get(name) if keep else None
            if entry is not None and entry[1] > time.monotonic():
                return entry[0]
            generation = self._generation
        invalidation.listen()
        value = self._load(key)
        if keep:
            with self._lock:
                if generation == self._generation:
                    if name not in self._entries and len(self._entries) >= self.max_entries:
                        del self._entries[next(iter(self._entries))]
                    self._entries[name] = (value, time.monotonic() + self.ttl)
        return value

    def drop(self, key: str | None = None) -> None:
        """The topic's subscriber: cheap, thread-safe, never raises."""
        with self._lock:
            self._generation += 1
            if key is None:
                self._entries.clear()
            else:
                self._entries.pop(key, None)

    def changed(self, key: Hashable = None) -> None:
        """What `key`'s answer is read from changed (None: every key's): dropped here now, and in every process
        once the current transaction commits (at once outside one)."""
        name = None if key is None else str(key)
        invalidation.drop_here(self.topic, name)
        transaction.on_commit(lambda: invalidation.announce(self.topic, name))

    def follows(self, model: type[Model], *, key: Callable[[Any], Hashable] | None = None,
                when: Callable[[Any], bool] | None = None) -> None:
        """Call `changed` on each save and delete of a `model` row (post_save, post_delete) for which `when(row)`
        holds (default: every row): `changed(key(row))`, or every key's without `key`. Call it from the app's
        `ready()`; a second call for this topic is ignored (Django's dispatch_uid), so a repeated ready() connects
        nothing twice."""

        def on_change(sender: type[Model], instance: Any, **kwargs: Any) -> None:
            if when is None or when(instance):
                self.changed(None if key is None else key(instance))

        for name, signal in (("save", post_save), ("delete", post_delete)):
            signal.connect(on_change, sender=model, weak=False, dispatch_uid=f"kept-{self.topic}-{name}")

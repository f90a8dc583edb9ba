"""The task queue's brokers: on SQLite django-q2's ORM broker, whose pusher waits for a wake instead of polling;
on Redis django-q2's Redis broker, whose pusher also hears its own cluster's stop.

django-q2's ORM broker polls the queue table while it is empty, which costs an idle server CPU and delays a
queued task. On SQLite every process that queues is on this host, so the pusher waits on the queue's doorbell
(agentsite/core/localwake.py) for at most IDLE_POLL_S, and whoever queues a task rings it once the row is
committed. The table stays the queue: a lost wake costs a wait, never a task. Without the socket (not Linux,
another pusher holds it) the pusher polls as django-q2's does; PostgreSQL keeps django-q2's broker.

A stopping cluster wakes its pusher on both, which otherwise sleeps out its wait before it sees the stop (every
stop of serve took that long): the sentinel saves the cluster's status through its broker, also every 0.1 s while
it waits for the stopped pusher (django-q2's Sentinel.stop), and a saved status that says STOPPING is the wake.
"""

from __future__ import annotations

import secrets
import time
from datetime import datetime
from typing import Any

from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.brokers.redis_broker import Redis
from django_q.conf import Conf
from django_q.signing import SignedPackage

from agentsite.core.localwake import Doorbell

IDLE_POLL_S = 5.0  # the pusher's longest wait on an empty queue (a lost wake, a retry lock that ran out)
REDIS_WAIT_S = 1  # the Redis pusher's longest wait on an empty queue (django-q2's)
WAKE_BOUND_S = 0.05  # what the tests allow between a commit and the pusher's next look

_doorbells: dict[tuple[str, str], Doorbell] = {}


def doorbell(list_key: str) -> Doorbell:
    """The pusher's doorbell for this queue on this database (agentsite/core/localwake.py)."""
    using = Conf.ORM or "default"
    bell = _doorbells.get((using, list_key))
    if bell is None:
        bell = _doorbells[(using, list_key)] = Doorbell(f"taskqueue:{list_key}", using)
    return bell


def wake_address(list_key: str) -> bytes:
    """The abstract socket name of the pusher of this database file and queue."""
    return doorbell(list_key).address()


def wake(list_key: str) -> None:
    """Tell the pusher of this queue to look now (no-op when none listens)."""
    doorbell(list_key).ring()


def wake_on_commit(list_key: str) -> None:
    """Wake the pusher once the current transaction commits (at once outside one)."""
    doorbell(list_key).ring_on_commit()


class LocalORM(ORM):
    """django-q2's ORM broker for a database on this host (see the module docstring)."""

    def enqueue(self, task: str) -> Any:
        task_id = super().enqueue(task)
        wake_on_commit(self.list_key)
        return task_id

    def dequeue(self) -> list[tuple[Any, str]] | None:
        tasks = self.get_connection().filter(key=self.list_key, lock__lt=self._now())[0:Conf.BULK]
        if tasks:
            taken = []
            for task in tasks:
                if self.get_connection().filter(id=task.id, lock=task.lock).update(lock=self.timeout(task)):
                    taken.append((task.pk, task.payload))
                # else another cluster took it first
            return taken
        self._wait()
        return None

    def set_stat(self, key: str, value: str, timeout: int) -> None:
        """A stopping status rings the pusher's doorbell (the module docstring)."""
        super().set_stat(key, value, timeout)
        if stopping(value):
            wake(self.list_key)

    @staticmethod
    def _now() -> datetime:
        return timezone.now()

    def _wait(self) -> None:
        """Until a wake or IDLE_POLL_S; `poll` seconds when this process holds no wake socket."""
        bell = doorbell(self.list_key)
        if not bell.listen():
            time.sleep(Conf.POLL)
            return
        bell.wait(IDLE_POLL_S)


class StoppableRedis(Redis):
    """django-q2's Redis broker whose pusher waits on two lists: the queue, and a stop list of its own cluster that a
    stopping status fills (the module docstring). The stop list's name is drawn when the cluster makes its broker,
    so its sentinel and pusher, forked from it, share the name, and no other cluster on the Redis hears it."""

    def __init__(self, list_key: str | None = None) -> None:
        super().__init__(list_key)
        self.stop_key = f"{self.list_key}:stop:{secrets.token_hex(8)}"

    def __getstate__(self) -> tuple[Any, ...]:
        return (*super().__getstate__(), self.stop_key)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        *parent, self.stop_key = state
        super().__setstate__(tuple(parent))

    def dequeue(self) -> list[tuple[Any, str]] | None:
        popped = self.connection.blpop([self.list_key, self.stop_key], REDIS_WAIT_S)
        if popped and popped[0] == self.list_key.encode():
            return [(None, popped[1])]
        return None

    def set_stat(self, key: str, value: str, timeout: int) -> None:
        super().set_stat(key, value, timeout)
        if stopping(value):
            pipeline = self.connection.pipeline(transaction=False)
            pipeline.rpush(self.stop_key, b"")
            pipeline.expire(self.stop_key, 60)  # what the pusher did not pop (it was gone) goes soon after
            pipeline.execute()


def stopping(status: str) -> bool:
    """Whether a cluster status, as the sentinel saves it, says the cluster is stopping."""
    return getattr(SignedPackage.loads(status), "status", None) == Conf.STOPPING

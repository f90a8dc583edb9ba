"""The task queue's broker on SQLite: django-q2's ORM broker, whose pusher waits for a wake instead of polling.

django-q2's ORM broker finds queued tasks by polling: its pusher reads the queue table every `poll` seconds
(0.2) while it is empty, which on an idle `serve` was the largest share of the CPU it used doing nothing
(bench/RESULTS.md, Under serve) and a wait of up to 0.2 s before a queued task started. A SQLite database is
one host's, so every process that queues a task can tell the pusher directly:

- the pusher (`dequeue`) holds the queue's doorbell (agentsite/core/localwake.py: a Unix datagram socket
  named after the database file and the queue) and when the queue is empty waits on it for at most
  IDLE_POLL_S (5 s) instead of sleeping `poll`: tasks whose retry lock runs out (a task lost with its worker,
  after `retry`, 660 s) and wakes that got lost are still found within those seconds;
- whoever queues a task (`enqueue`, and agentsite.core.taskqueue's batched insert) rings it once the task's
  row is committed (`transaction.on_commit`: before, the pusher would not see it).

A wake is only a hint to look now: the table stays the queue, so nothing is lost when a datagram is (a full
socket buffer, a pusher restarting). When the socket cannot be had (not Linux, another cluster's pusher on the
same database already holds it) the pusher polls every `poll` seconds, as django-q2's own broker does.
PostgreSQL without Redis keeps django-q2's ORM broker: its pushers may be on several hosts.

Invariants (tests/foundation/test_qbroker.py): a task queued in another process is taken within
WAKE_BOUND_S of its commit without waiting for a poll; one queued inside a transaction is taken once the
transaction commits; with no wake at all a queued task is still taken within IDLE_POLL_S.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from django_q.brokers.orm import ORM
from django_q.conf import Conf

from agentsite.core.localwake import Doorbell

IDLE_POLL_S = 5.0  # the pusher's longest wait on an empty queue (a lost wake, a retry lock that ran out)
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

    @staticmethod
    def _now() -> datetime:
        from django.utils import timezone

        return timezone.now()

    def _wait(self) -> None:
        """Until a wake or IDLE_POLL_S; `poll` seconds when this process holds no wake socket."""
        bell = doorbell(self.list_key)
        if not bell.listen():
            time.sleep(Conf.POLL)
            return
        bell.wait(IDLE_POLL_S)

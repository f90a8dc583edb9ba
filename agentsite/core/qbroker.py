"""The task queue's broker on SQLite: django-q2's ORM broker, whose pusher waits for a wake instead of polling.

django-q2's ORM broker finds queued tasks by polling: its pusher reads the queue table every `poll` seconds
(0.2) while it is empty, which on an idle `serve` was the largest share of the CPU it used doing nothing
(bench/RESULTS.md, Under serve) and a wait of up to 0.2 s before a queued task started. A SQLite database is
one host's, so every process that queues a task can tell the pusher directly:

- the pusher (`dequeue`) binds a Unix datagram socket in Linux's abstract namespace, named after the database
  file and the queue, and when the queue is empty waits on it for at most IDLE_POLL_S (1 s) instead of
  sleeping `poll`: tasks whose retry lock runs out (a task lost with its worker) and wakes that got lost are
  still found within that second;
- whoever queues a task (`enqueue`, and agentsite.core.taskqueue's batched insert) sends one empty datagram
  there once the task's row is committed (`transaction.on_commit`: before, the pusher would not see it).

A wake is only a hint to look now: the table stays the queue, so nothing is lost when a datagram is (a full
socket buffer, a pusher restarting). When the socket cannot be had (not Linux, another cluster's pusher on the
same database already holds it) the pusher polls every `poll` seconds, as django-q2's own broker does.
PostgreSQL without Redis keeps django-q2's ORM broker: its pushers may be on several hosts.

Invariants (tests/foundation/test_qbroker.py): a task queued in another process is taken within
WAKE_BOUND_S of its commit without waiting for a poll; one queued inside a transaction is taken once the
transaction commits; with no wake at all a queued task is still taken within IDLE_POLL_S.
"""

from __future__ import annotations

import hashlib
import select
import socket
import time
from datetime import datetime
from typing import Any

from django.db import transaction
from django_q.brokers.orm import ORM
from django_q.conf import Conf

IDLE_POLL_S = 1.0  # the pusher's longest wait on an empty queue (a lost wake, a retry lock that ran out)
WAKE_BOUND_S = 0.05  # what the tests allow between a commit and the pusher's next look


def wake_address(list_key: str) -> bytes:
    """The abstract socket name of the pusher of this database file and queue."""
    from django.db import connections

    database = str(connections[Conf.ORM or "default"].settings_dict["NAME"])
    digest = hashlib.sha256(f"{database}\0{list_key}".encode()).hexdigest()[:24]
    return b"\0agentsite-taskqueue-" + digest.encode()


def wake(list_key: str) -> None:
    """Tell the pusher of this queue to look now (no-op when none listens)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            sock.sendto(b"", wake_address(list_key))
    except OSError:  # no pusher bound (not started, another platform), or its buffer is full: it looks anyway
        pass


def wake_on_commit(list_key: str) -> None:
    """Wake the pusher once the current transaction commits (at once outside one)."""
    transaction.on_commit(lambda: wake(list_key), using=Conf.ORM)


class LocalORM(ORM):
    """django-q2's ORM broker for a database on this host (see the module docstring)."""

    _listener: socket.socket | None = None
    _bind_failed = False

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
        listener = self._wake_listener()
        if listener is None:
            time.sleep(Conf.POLL)
            return
        readable, _, _ = select.select([listener], [], [], IDLE_POLL_S)
        if readable:
            try:
                while True:  # every wake sent so far: one look serves them all
                    listener.recv(16)
            except BlockingIOError:
                pass

    def _wake_listener(self) -> socket.socket | None:
        if self._listener is None and not self._bind_failed:
            sock = None
            try:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                sock.bind(wake_address(self.list_key))
                sock.setblocking(False)
                type(self)._listener = sock
            except (OSError, AttributeError):  # taken by another pusher, or no AF_UNIX / abstract names here
                if sock is not None:
                    sock.close()
                type(self)._bind_failed = True
        return self._listener

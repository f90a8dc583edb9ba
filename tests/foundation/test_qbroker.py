"""agentsite.core.qbroker: on SQLite the task queue's pusher waits for a wake, not a poll, and loses nothing."""

from __future__ import annotations

import secrets
import socket
import threading
import time

import pytest
from django.conf import settings
from django.db import connection, transaction
from django_q.brokers import get_broker
from django_q.conf import Conf
from django_q.models import OrmQ
from django_q.tasks import async_task

from agentsite.core import qbroker
from agentsite.core.qbroker import IDLE_POLL_S, LocalORM
from agentsite.core.taskqueue import enqueue_with_commit

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(settings.DATABASES["default"]["ENGINE"] != "agentsite.core.db.sqlite3"
                                 or bool(getattr(settings, "REDIS_URL", "")), reason="the SQLite broker's tests")]

FUNC = "scheduler.tasks.task_runs_execute"
# Between a commit and the pusher taking the task: far below IDLE_POLL_S, so a pusher that only polled fails.
PROMPT_S = 0.4


@pytest.fixture
def broker(monkeypatch):
    """A LocalORM of a queue of this test's own, with a wake socket of its own (as a fresh pusher process)."""
    monkeypatch.setattr(Conf, "SYNC", False)
    monkeypatch.setattr(Conf, "CLUSTER_NAME", f"qbroker-test-{secrets.token_hex(4)}")
    broker = get_broker()
    yield broker
    qbroker.doorbell(broker.list_key).close()
    broker.purge_queue()


class Pusher(threading.Thread):
    """django-q2's pusher loop over the broker on a thread: when each task was taken (monotonic time)."""

    def __init__(self, broker, expected: int = 1):
        super().__init__(daemon=True)
        self.broker, self.expected, self.taken = broker, expected, []
        self.waiting = threading.Event()

    def run(self) -> None:
        deadline = time.monotonic() + 10
        try:
            while len(self.taken) < self.expected and time.monotonic() < deadline:
                self.waiting.set()
                for _ in self.broker.dequeue() or ():
                    self.taken.append(time.monotonic())
        finally:
            connection.close()


def test_the_sqlite_default_uses_the_waking_broker(broker):
    assert type(broker) is LocalORM and Conf.ORM == "default"


def test_a_queued_task_is_taken_at_its_commit_not_at_the_next_poll(broker):
    pusher = Pusher(broker)
    pusher.start()
    pusher.waiting.wait(5)
    time.sleep(0.3)  # the pusher is now waiting on an empty queue
    queued = time.monotonic()
    async_task(FUNC, "one")
    pusher.join(10)
    assert pusher.taken, "the task was never taken"
    assert pusher.taken[0] - queued < PROMPT_S, f"taken {pusher.taken[0] - queued:.3f} s after it was queued"


def test_a_task_queued_in_a_transaction_is_taken_once_it_commits(broker):
    pusher = Pusher(broker)
    pusher.start()
    pusher.waiting.wait(5)
    with transaction.atomic():
        enqueue_with_commit(FUNC, [("in a transaction",)])
        time.sleep(0.3)
        assert not pusher.taken, "a task was taken before its transaction committed"
        committing = time.monotonic()
    pusher.join(10)
    assert pusher.taken and pusher.taken[0] >= committing
    assert pusher.taken[0] - committing < PROMPT_S, f"taken {pusher.taken[0] - committing:.3f} s after the commit"


def test_a_task_nobody_woke_the_pusher_for_is_still_taken_within_the_idle_poll(broker):
    pusher = Pusher(broker)
    pusher.start()
    pusher.waiting.wait(5)
    time.sleep(0.2)
    from django.utils import timezone

    queued = time.monotonic()
    OrmQ.objects.create(key=broker.list_key, payload="x", lock=timezone.now())  # no wake: as a lost datagram
    pusher.join(10)
    assert pusher.taken and pusher.taken[0] - queued < IDLE_POLL_S + 0.5


def test_every_task_of_a_burst_is_taken(broker):
    pusher = Pusher(broker, expected=30)
    pusher.start()
    pusher.waiting.wait(5)
    for index in range(30):
        async_task(FUNC, index)
    pusher.join(10)
    assert len(pusher.taken) == 30


def test_a_second_pusher_on_the_same_queue_polls_as_django_q2_does(broker, monkeypatch):
    holder = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    holder.bind(qbroker.wake_address(broker.list_key))  # another cluster's pusher holds the wake socket
    slept: list[float] = []
    monkeypatch.setattr(qbroker.time, "sleep", slept.append)
    try:
        assert broker.dequeue() is None
        assert not qbroker.doorbell(broker.list_key).listen() and slept == [Conf.POLL]
        qbroker.wake(broker.list_key)  # goes to the holder, harmlessly
        assert holder.recv(16) == b""
    finally:
        holder.close()


def test_a_wake_with_no_pusher_listening_is_harmless(broker):
    qbroker.wake(broker.list_key)
    async_task(FUNC, "nobody listens")
    assert OrmQ.objects.filter(key=broker.list_key).count() == 1

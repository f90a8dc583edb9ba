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
from agentsite.core.qbroker import LocalORM
from agentsite.core.taskqueue import enqueue_with_commit

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(settings.DATABASES["default"]["ENGINE"] != "agentsite.core.db.sqlite3"
                                 or bool(getattr(settings, "REDIS_URL", "")), reason="the SQLite broker's tests")]

FUNC = "scheduler.tasks.task_runs_execute"
# A pusher that only polled would take a task after IDLE_POLL_S: made far longer than a test's deadline here, so
# a task taken within the deadline was taken at its wake.
NO_POLL_S = 120.0
DEADLINE_S = 10.0


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
    """django-q2's pusher loop over the broker on a thread: the tasks it took, and each time it went to sleep on
    an empty queue (`asleep(n)` waits for the n-th)."""

    def __init__(self, broker, expected: int = 1):
        super().__init__(daemon=True)
        self.broker, self.expected, self.taken = broker, expected, []
        self.sleeps = 0
        # Bound before the pusher runs (as a cluster's pusher binds at its start): a wake sent before it first
        # waits is kept in the socket, not lost.
        assert qbroker.doorbell(broker.list_key).listen(), "this process could not bind the queue's doorbell"
        self._changed = threading.Condition()
        wait = broker._wait

        def counted_wait() -> None:
            with self._changed:
                self.sleeps += 1
                self._changed.notify_all()
            wait()

        broker._wait = counted_wait

    def run(self) -> None:
        deadline = time.monotonic() + DEADLINE_S
        try:
            while len(self.taken) < self.expected and time.monotonic() < deadline:
                for _ in self.broker.dequeue() or ():
                    self.taken.append(time.monotonic())
        finally:
            connection.close()

    def asleep(self, count: int = 1) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: self.sleeps >= count, timeout=DEADLINE_S):
                raise AssertionError(f"the pusher did not go to sleep on an empty queue ({count} time(s))")

    def took_all(self, what: str) -> None:
        self.join(DEADLINE_S + 5)
        assert len(self.taken) == self.expected, f"{what}: {len(self.taken)} of {self.expected} task(s) taken"


def test_the_sqlite_default_uses_the_waking_broker(broker):
    assert type(broker) is LocalORM and Conf.ORM == "default"


def test_a_queued_task_is_taken_at_its_commit_not_at_the_next_poll(broker, monkeypatch):
    monkeypatch.setattr(qbroker, "IDLE_POLL_S", NO_POLL_S)
    pusher = Pusher(broker)
    pusher.start()
    pusher.asleep()
    async_task(FUNC, "one")
    pusher.took_all(f"not taken within {DEADLINE_S} s: the pusher was not woken (its poll is {NO_POLL_S} s)")


def test_a_task_queued_in_a_transaction_is_taken_once_it_commits(broker, monkeypatch):
    monkeypatch.setattr(qbroker, "IDLE_POLL_S", NO_POLL_S)
    pusher = Pusher(broker)
    pusher.start()
    pusher.asleep()
    with transaction.atomic():
        enqueue_with_commit(FUNC, [("in a transaction",)])
        qbroker.wake(broker.list_key)  # the pusher looks now, while the task is not committed
        pusher.asleep(2)
        assert not pusher.taken, "a task was taken before its transaction committed"
    pusher.took_all(f"not taken within {DEADLINE_S} s of its commit")


def test_a_task_nobody_woke_the_pusher_for_is_still_taken_within_the_idle_poll(broker, monkeypatch):
    monkeypatch.setattr(qbroker, "IDLE_POLL_S", 0.5)
    pusher = Pusher(broker)
    pusher.start()
    pusher.asleep()
    from django.utils import timezone

    OrmQ.objects.create(key=broker.list_key, payload="x", lock=timezone.now())  # no wake: as a lost datagram
    pusher.took_all("a task queued without a wake was never taken by the idle poll")


def test_every_task_of_a_burst_is_taken(broker):
    pusher = Pusher(broker, expected=30)
    pusher.start()
    pusher.asleep()
    for index in range(30):
        async_task(FUNC, index)
    pusher.took_all("a burst of 30")


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


def cluster_status(status: str) -> str:
    """A cluster status as django-q2's sentinel saves it through the broker (Stat(sentinel).save())."""
    from django_q.signing import SignedPackage
    from django_q.status import Status

    stat = Status(pid=1, cluster_id="qbroker-test")
    stat.status = status
    return SignedPackage.dumps(stat, True)


def stopped_by_its_status(broker, monkeypatch) -> bool:
    """Run django-q2's pusher over `broker` on a thread until it waits on the empty queue, tell it to stop as the
    sentinel does, save a STOPPING status: whether the pusher has stopped within DEADLINE_S (the caller makes the
    broker's own wait far longer). Shared with test_qbroker_redis.py."""
    from multiprocessing import Event, Queue

    from django_q import pusher as module
    from django_q.pusher import pusher

    monkeypatch.setattr(module, "setproctitle", None)  # it would retitle this process "qcluster ... pusher"
    stop = Event()
    thread = threading.Thread(target=pusher, args=(Queue(), stop, broker), daemon=True)
    thread.start()
    time.sleep(0.2)  # into its wait on the empty queue
    stop.set()
    broker.set_stat(f"{broker.list_key}:stat", cluster_status(Conf.STOPPING), 3)
    thread.join(DEADLINE_S)
    return not thread.is_alive()


def test_only_a_stopping_status_says_stopping():
    assert [qbroker.stopping(cluster_status(status)) for status in (
        Conf.STARTING, Conf.IDLE, Conf.WORKING, Conf.STOPPING, Conf.STOPPED)] == [False, False, False, True, False]


def test_a_stopping_cluster_wakes_its_pusher_which_stops_at_once(broker, monkeypatch):
    """serve's stop waited the pusher's whole idle wait (~4 s of every stop): the stopping status the sentinel saves
    after telling the pusher to stop now rings its doorbell."""
    monkeypatch.setattr(qbroker, "IDLE_POLL_S", NO_POLL_S)
    assert qbroker.doorbell(broker.list_key).listen()
    assert stopped_by_its_status(broker, monkeypatch), (
        f"the pusher did not stop within {DEADLINE_S} s (its idle wait is {NO_POLL_S} s)")


def test_a_running_clusters_status_wakes_nobody(broker, monkeypatch):
    rings: list[str] = []
    monkeypatch.setattr(qbroker, "wake", rings.append)
    for status in (Conf.STARTING, Conf.IDLE, Conf.WORKING):
        broker.set_stat("qbroker-test-stat", cluster_status(status), 3)
    assert rings == []
    broker.set_stat("qbroker-test-stat", cluster_status(Conf.STOPPING), 3)
    assert rings == [broker.list_key]

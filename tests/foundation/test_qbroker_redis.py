"""agentsite.core.qbroker.StoppableRedis: on Redis the task queue's pusher hears its own cluster's stop at once, and
only its own."""

from __future__ import annotations

import pickle
import secrets

import pytest
from django.conf import settings
from django_q.brokers import get_broker
from django_q.conf import Conf

from agentsite.core import qbroker
from agentsite.core.qbroker import StoppableRedis
from tests.foundation.test_qbroker import DEADLINE_S, NO_POLL_S, cluster_status, stopped_by_its_status

# django_db: the Redis pass keeps only tests that use its backend (tests/conftest.py), and Redis is part of it.
pytestmark = [pytest.mark.django_db,
              pytest.mark.skipif(not getattr(settings, "REDIS_URL", ""), reason="the Redis broker's tests")]


@pytest.fixture
def broker(monkeypatch):
    """The broker of a cluster on a queue of this test's own (as a cluster makes it, before it forks)."""
    monkeypatch.setattr(Conf, "CLUSTER_NAME", f"qbroker-test-{secrets.token_hex(4)}")
    broker = get_broker()
    yield broker
    broker.connection.delete(broker.list_key, broker.stop_key)


def test_redis_uses_the_broker_that_hears_its_stop(broker):
    assert type(broker) is StoppableRedis


def test_a_stopping_cluster_wakes_its_pusher_which_stops_at_once(broker, monkeypatch):
    monkeypatch.setattr(qbroker, "REDIS_WAIT_S", NO_POLL_S)
    assert stopped_by_its_status(broker, monkeypatch), (
        f"the pusher did not stop within {DEADLINE_S} s (its wait is {NO_POLL_S} s)")


def test_a_running_clusters_status_wakes_nobody(broker):
    for status in (Conf.STARTING, Conf.IDLE, Conf.WORKING):
        broker.set_stat(f"{broker.list_key}:stat", cluster_status(status), 3)
    assert broker.connection.llen(broker.stop_key) == 0
    broker.set_stat(f"{broker.list_key}:stat", cluster_status(Conf.STOPPING), 3)
    assert broker.connection.llen(broker.stop_key) == 1


def test_another_clusters_stop_is_not_taken_for_a_task_nor_heard(broker):
    """Two clusters on one queue (two hosts, or serve's restart): each has its own stop list; a stop is never
    returned as a task, and the queue's tasks still come out."""
    other = get_broker()
    assert other.list_key == broker.list_key and other.stop_key != broker.stop_key
    other.set_stat(f"{other.list_key}:stat", cluster_status(Conf.STOPPING), 3)
    broker.set_stat(f"{broker.list_key}:stat", cluster_status(Conf.STOPPING), 3)
    broker.enqueue("a task")
    assert broker.dequeue() == [(None, b"a task")]  # the queue first (BLPOP looks at its lists in order)
    assert broker.dequeue() is None  # then its own stop
    assert broker.connection.llen(other.stop_key) == 1  # the other's stop is left for the other's pusher
    other.connection.delete(other.stop_key)


def test_the_sentinel_and_the_pusher_share_the_clusters_stop_list(broker):
    """The sentinel and the pusher get the broker forked; pickled (spawn) it keeps the list too."""
    copy = pickle.loads(pickle.dumps(broker))
    assert (copy.list_key, copy.stop_key) == (broker.list_key, broker.stop_key)
    assert copy.connection.ping()

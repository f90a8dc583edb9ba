"""agentsite.core.taskqueue: tasks queued in one round trip, indistinguishable from async_task's, with the
transaction."""

from __future__ import annotations

import secrets

import pytest
from django.db import transaction
from django_q.brokers import get_broker
from django_q.conf import Conf
from django_q.models import OrmQ
from django_q.signing import SignedPackage
from django_q.tasks import async_task

from agentsite.core.taskqueue import enqueue, enqueue_with_commit

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def queue(monkeypatch):
    """A queue of this test's own (live servers may share the Redis database), not run inline."""
    monkeypatch.setattr(Conf, "SYNC", False)
    monkeypatch.setattr(Conf, "CLUSTER_NAME", f"taskqueue-test-{secrets.token_hex(4)}")
    broker = get_broker()
    yield broker
    broker.purge_queue()


def queued(broker) -> list[dict]:
    if Conf.ORM:
        payloads = OrmQ.objects.using(Conf.ORM).filter(key=broker.list_key).order_by("id").values_list(
            "payload", flat=True)
    else:
        payloads = broker.connection.lrange(broker.list_key, 0, -1)
    return [SignedPackage.loads(payload) for payload in payloads]


def test_tasks_are_queued_in_order_as_the_packages_async_task_builds(queue):
    ids = enqueue("scheduler.tasks.task_runs_execute", [("a", "b"), ("c",)])
    async_task("scheduler.tasks.task_runs_execute", "d")
    first, second, reference = queued(queue)
    assert [first["id"], second["id"]] == ids and len(set(ids)) == 2
    assert (first["args"], second["args"], reference["args"]) == (("a", "b"), ("c",), ("d",))
    assert first.keys() == reference.keys()
    assert {key: first[key] for key in first if key not in ("id", "name", "args", "started")} == {
        key: reference[key] for key in reference if key not in ("id", "name", "args", "started")}


def test_nothing_is_queued_for_no_calls(queue):
    assert enqueue("scheduler.tasks.task_runs_execute", []) == []
    enqueue_with_commit("scheduler.tasks.task_runs_execute", [])
    assert queued(queue) == []


def test_tasks_queued_with_a_transaction_that_rolls_back_are_never_queued(queue):
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue_with_commit("scheduler.tasks.task_runs_execute", [("lost",)])
        raise RuntimeError("the work failed")
    assert queued(queue) == []


def test_tasks_queued_with_a_transaction_are_there_once_it_commits(queue):
    with transaction.atomic():
        enqueue_with_commit("scheduler.tasks.task_runs_execute", [("kept",), ("too",)])
        if Conf.ORM:  # in the caller's transaction: the rows are written with the work
            assert OrmQ.objects.filter(key=queue.list_key).count() == 2
        else:  # pushed only after the commit: no worker meets a run that is not there yet
            assert queued(queue) == []
    assert [task["args"] for task in queued(queue)] == [("kept",), ("too",)]

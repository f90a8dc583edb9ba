"""Queueing work for the django-q2 cluster, in batches.

`enqueue(func, calls)` queues one task per argument tuple, each exactly the package `async_task` builds, but in
one round trip (one multi-row INSERT on the ORM broker, one pipelined RPUSH on Redis) instead of one a task.
`enqueue_with_commit` is for code that records work in a transaction: on the ORM broker the tasks commit with it,
on other brokers they are pushed once it has committed.

Trace context crosses the queue: a task queued inside a span carries its `traceparent`, and the worker runs it
under a `task <func>` span whose parent is that context (agentsite/core/tracing.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentsite.core import tracing

TRACE_KEY = "traceparent"
_traced: dict[str, tuple[Any, Any]] = {}  # task id -> (its span, the context token), while a traced task runs


def enqueue(func: str, calls: Iterable[Sequence[Any]], *, traceparent: str | None = None) -> list[str]:
    """Queue `func(*args)` for each args in calls; returns the task ids, in order. Each task carries
    `traceparent` (default: the current span's, when tracing is on)."""
    # django-q2's modules read Django's settings when imported; this one is imported before they are set.
    from django_q.brokers import get_broker
    from django_q.conf import Conf
    from django_q.humanhash import uuid
    from django_q.signals import pre_enqueue
    from django_q.signing import SignedPackage
    from django_q.tasks import async_task

    calls = [tuple(args) for args in calls]
    if not calls:
        return []
    if Conf.SYNC:  # run inline, as async_task does, one after another (in this context: its trace goes on)
        return [async_task(func, *args) for args in calls]
    traceparent = traceparent or tracing.traceparent()
    broker = get_broker()
    ids, packs = [], []
    for args in calls:
        human, tag = uuid()
        task: dict[str, Any] = {"id": tag, "name": human, "func": func, "args": args}
        if Conf.CACHED:
            task["cached"] = Conf.CACHED
        if Conf.ACK_FAILURES:
            task["ack_failure"] = Conf.ACK_FAILURES
        task["kwargs"] = {}
        if traceparent:
            task[TRACE_KEY] = traceparent
        task["started"] = timezone.now()
        pre_enqueue.send(sender="django_q", task=task)
        ids.append(task["id"])
        packs.append(SignedPackage.dumps(task))
    _push(broker, packs, Conf)
    return ids


def enqueue_with_commit(func: str, calls: Iterable[Sequence[Any]]) -> None:
    """Queue the calls with the current transaction (see the module docstring)."""
    # django-q2's modules read Django's settings when imported; this one is imported before they are set.
    from django_q.conf import Conf

    calls = [tuple(args) for args in calls]
    if not calls:
        return
    traceparent = tracing.traceparent()  # the caller's span, now: the commit may come after it ended
    if Conf.ORM and not Conf.SYNC and not transaction.get_autocommit(using=Conf.ORM):
        enqueue(func, calls, traceparent=traceparent)
    else:
        transaction.on_commit(lambda: enqueue(func, calls, traceparent=traceparent))


def task_started(sender: Any = None, func: Any = None, task: dict[str, Any] | None = None, **_: Any) -> None:
    """django-q2's `pre_execute` (in the worker, just before the function runs): a task that carries a trace
    context runs under its `task <func>` span, made current for the function (the same thread)."""
    if not tracing.ENABLED or not task or not task.get(TRACE_KEY):
        return
    name = task["func"] if isinstance(task.get("func"), str) else getattr(func, "__qualname__", "task")
    span = tracing.start(f"task {name}", "consumer", parent=tracing.extract(task[TRACE_KEY]), **{
        "messaging.system": "django_q", "messaging.operation.type": "process",
        "messaging.message.id": str(task.get("id", "")), "agentsite.task.func": name})
    _traced[str(task.get("id"))] = (span, tracing.attach(span))


def task_finished(sender: Any = None, func: Any = None, task: dict[str, Any] | None = None, **_: Any) -> None:
    """django-q2's `post_execute_in_worker`: the task's span ends (failed when the function raised)."""
    if not _traced or not task:
        return
    traced = _traced.pop(str(task.get("id")), None)
    if traced is not None:
        span, token = traced
        tracing.detach(token)
        tracing.end(span, None if task.get("success") else "task_failed")


def connect_trace_hooks() -> None:
    """Listen to django-q2's worker signals (agentsite's AppConfig.ready, in every process)."""
    # django-q2's modules read Django's settings when imported; this one is imported before they are set.
    from django_q.signals import post_execute_in_worker, pre_execute

    pre_execute.connect(task_started, dispatch_uid="agentsite.taskqueue.task_started")
    post_execute_in_worker.connect(task_finished, dispatch_uid="agentsite.taskqueue.task_finished")


def _push(broker: Any, packs: list[str], conf: Any) -> None:
    # django-q2's modules read Django's settings when imported (qbroker's too); this one is imported before.
    from django_q.brokers.orm import ORM
    from django_q.brokers.redis_broker import Redis

    from agentsite.core.qbroker import LocalORM

    if type(broker) in (ORM, LocalORM):
        # Django's app registry (and django-q2 reads the settings when imported).
        from django_q.models import OrmQ

        now = timezone.now()
        key = broker.list_key or conf.CLUSTER_NAME
        OrmQ.objects.using(conf.ORM).bulk_create([OrmQ(key=key, payload=pack, lock=now) for pack in packs])
        if type(broker) is LocalORM:
            # qbroker imports django-q2, which reads Django's settings when imported.
            from agentsite.core.qbroker import wake_on_commit

            wake_on_commit(key)  # the pusher looks once the rows are committed, not at its next poll
    elif isinstance(broker, Redis):  # django-q2's, or qbroker's StoppableRedis
        pipeline = broker.connection.pipeline(transaction=False)
        for pack in packs:
            pipeline.rpush(broker.list_key, pack)
        pipeline.execute()
    else:
        for pack in packs:
            broker.enqueue(pack)


def queue_depth() -> list[tuple[str, str, float]]:
    """agentsite_task_queue_depth: tasks waiting in the broker (one queue per deployment), read at scrape time."""
    # django-q2's modules read Django's settings when imported; this one is imported before they are set.
    from django_q.brokers import get_broker

    return [("agentsite_task_queue_depth", "Tasks waiting in the task queue.", float(get_broker().queue_size()))]

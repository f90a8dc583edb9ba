"""Writes of the scheduler: tasks (validated on every save), the tick, manual runs, and run records.

The tick (`tick()`, run by the timer at each task's instant and by a django-q2 schedule as a fallback) records one
run for each due task (a `schedule` run, the task's `missed` policy after downtime, or a `skipped` run saying
why), under the `(task, scheduled_for)` unique constraint so that racing ticks record it once, and queues the
runs after commit.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, F, Q
from django.db.models.constants import OnConflict
from django.utils import timezone
from django_q.models import Schedule

from agentsite.agent.modelchoice import model_checked
from agentsite.core import invalidation, metrics
from agentsite.core.errors import AppError
from agentsite.core.processes import current_process_id, owned_by
from agentsite.core.taskqueue import enqueue_with_commit
from scheduler.cron import ScheduleError, cron_normalize, next_after, occurrences, zone
from scheduler.models import ScheduledTask, TaskRun
from sessions_app.agents import DEFAULT_AGENT, agent_chosen
from sessions_app.models import ChatSession
from workflows.models import Workflow, WorkflowVersion

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

logger = logging.getLogger(__name__)

HISTORY_KEPT = 100
MAX_PROMPT_CHARS = 32_000
COUNT_CAP = 10_000  # missed occurrences are counted up to here (a minutely task down for a year has 525,600)
TICK_SCHEDULE_NAME = "agentsite scheduler tick"
TOPIC = "scheduler.tasks"  # the invalidation channel's topic a saved task is announced on (the timer wakes)


def tick_interval_s() -> int:
    return int(getattr(settings, "AGENTSITE_SCHEDULER_TICK_S", 60))


def run_concurrency() -> int:
    """How many runs one queued task runs side by side."""
    return max(1, int(getattr(settings, "AGENTSITE_SCHEDULER_RUN_CONCURRENCY", 8)))


def grace() -> timedelta:
    """How late an occurrence may be found and still count as on time: two fallback tick periods (when the
    timer is not running, a tick comes up to 30 s late: django-q2 looks at its schedules every 30 s)."""
    return timedelta(seconds=2 * tick_interval_s())


# --- tasks ----------------------------------------------------------------------------------------------

def _invalid(field: str, message: str) -> AppError:
    return AppError("invalid", f"{field}: {message}", 400, {field: [message]})


def _check_schedule(cron: str, timezone_name: str) -> tuple[str, Any]:
    try:
        expression = cron_normalize(cron)
    except ScheduleError as exc:
        raise _invalid("cron", str(exc)) from None
    try:
        tz = zone(timezone_name)
    except ScheduleError as exc:
        raise _invalid("timezone", str(exc)) from None
    return expression, tz


def _check_model(model: str, workflow_id: uuid.UUID | None) -> str:
    if model and workflow_id is not None:
        raise _invalid("model", "A workflow task's llm nodes name their own models; leave model empty.")
    return model_checked(model)


def _check_agent(owner: AbstractBaseUser, slug: str | None, workflow_id: uuid.UUID | None) -> Any:
    """The agent row a task's `agent` slug names (None: none given, the agent `default`), for an owner who may use
    it: else 404 `not_found` naming `agent`. A workflow task names no agent but `default` (its llm nodes name
    their own): 400 `invalid` naming `agent`."""
    if slug is None:
        return None
    if workflow_id is not None and slug != DEFAULT_AGENT:
        raise _invalid("agent", "A workflow task's llm nodes name their own agents; leave agent out.")
    return agent_chosen(owner, slug)


def _check_version(workflow_id: uuid.UUID | None, version: int | None) -> None:
    """A pinned version needs a workflow that has it (a version, once made, is never deleted)."""
    if version is None:
        return
    if workflow_id is None:
        raise _invalid("workflow_version", "A version is pinned only with a workflow_id.")
    if not WorkflowVersion.objects.filter(workflow_id=workflow_id, number=version).exists():
        raise _invalid("workflow_version", f"The workflow has no version {version}.")


def _check_targets(*, owner: AbstractBaseUser, session_id: uuid.UUID | None, workflow_id: uuid.UUID | None) -> None:
    if session_id is not None and not ChatSession.objects.filter(pk=session_id, owner=owner).exists():
        raise _invalid("session_id", "No such session of yours.")
    if workflow_id is not None and not Workflow.objects.filter(pk=workflow_id, owner=owner).exists():
        raise _invalid("workflow_id", "No such workflow of yours.")


def _schedule_next(task: ScheduledTask, *, now: datetime) -> None:
    task.next_run_at = next_after(task.cron, zone(task.timezone), now) if task.enabled else None


TASK_FIELDS = ("name", "cron", "timezone", "prompt", "enabled", "session_id", "workflow_id", "workflow_version",
               "missed", "model", "agent")


def task_create(*, owner: AbstractBaseUser, name: str, cron: str, prompt: str, timezone_name: str = "UTC",
                enabled: bool = True, session_id: uuid.UUID | None = None, workflow_id: uuid.UUID | None = None,
                missed: str = ScheduledTask.RUN_ONCE, model: str = "",
                workflow_version: int | None = None, key: Any = None, agent: str | None = None) -> ScheduledTask:
    """Create a task with its next fire time. Raises AppError 400 naming `cron`, `timezone`, `session_id`,
    `workflow_id` (another user's session or workflow included), `model` (not in the model catalogue, or
    given with a workflow) or `agent` (other than `default` with a workflow), 404 `not_found` naming `agent`
    (a slug the owner may not use). `agent`: a slug (None: the agent `default`). `key`: the API key of the
    request (None: a dashboard token), whose the runs are."""
    task = ScheduledTask(owner=owner)
    return task_update(task=task, changes={"name": name, "cron": cron, "timezone": timezone_name, "prompt": prompt,
                                           "enabled": enabled, "session_id": session_id, "workflow_id": workflow_id,
                                           "missed": missed, "model": model, "agent": agent,
                                           "workflow_version": workflow_version}, key=key)


_KEEP: Any = object()


def task_update(*, task: ScheduledTask, changes: dict[str, Any], key: Any = _KEEP) -> ScheduledTask:
    """Apply any of the task's fields; the next fire time is computed from now when the schedule or `enabled`
    changes (a re-enabled task does not catch up on the time it was off). `key`: the API key of the request
    that writes it (None: a dashboard token), whose its runs become (the default keeps the task's). `agent` is a
    slug (checked with the owner's access now; a run checks it again). Raises AppError 400 and 404 as
    task_create."""
    unknown = set(changes) - set(TASK_FIELDS)
    assert not unknown, f"unknown task fields {unknown}"
    cron, timezone_name = changes.get("cron", task.cron), changes.get("timezone", task.timezone)
    expression, _tz = _check_schedule(cron, timezone_name)
    _check_targets(owner=task.owner, session_id=changes.get("session_id", task.session_id),
                   workflow_id=changes.get("workflow_id", task.workflow_id))
    _check_version(changes.get("workflow_id", task.workflow_id),
                   changes.get("workflow_version", task.workflow_version))
    if "model" in changes or "workflow_id" in changes:
        changes = {**changes, "model": _check_model(changes.get("model", task.model),
                                                    changes.get("workflow_id", task.workflow_id))}
    if "agent" in changes:
        changes = {**changes, "agent": _check_agent(task.owner, changes["agent"],
                                                    changes.get("workflow_id", task.workflow_id))}
    elif "workflow_id" in changes and task.agent_id is not None:
        _check_agent(task.owner, task.agent_slug, changes["workflow_id"])
    rescheduled = task._state.adding or any(
        name in changes and changes[name] != getattr(task, name) for name in ("cron", "timezone", "enabled"))
    for field, value in changes.items():
        setattr(task, field, value)
    if key is not _KEEP:
        task.created_by_key_id = None if key is None else key.pk
    task.cron = expression
    if rescheduled:
        _schedule_next(task, now=timezone.now())
    task.save()
    return task


def task_saved(sender: type, instance: ScheduledTask, **kwargs: Any) -> None:
    """post_save of a task: once committed, wake the scheduler's timers (this process's, and through the
    invalidation channel every process's: Redis, or on SQLite the host's) so that they read its next instant."""
    transaction.on_commit(lambda: invalidation.announce(TOPIC, instance.pk), robust=True)


def task_delete(*, task: ScheduledTask) -> None:
    task.delete()  # its runs go with it


# --- the tick -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Due:
    """What the tick found for one task: the occurrences from next_run_at to now (counted up to COUNT_CAP),
    and the first occurrence after now (the task's next run)."""

    first: datetime
    latest: datetime
    count: int
    following: datetime

    def on_time(self, now: datetime) -> bool:
        return self.count == 1 and now - self.latest <= grace()


def due_occurrences(task: ScheduledTask, *, now: datetime, walks: dict | None = None) -> Due:
    """One walk of the task's occurrences from its next_run_at (which is due) to the first one after now."""
    first = task.next_run_at
    assert first is not None and first <= now
    latest, count = first, 1
    for instant in occurrences(task.cron, zone(task.timezone), first, walks):
        if instant > now:
            return Due(first, latest, count, instant)
        if count < COUNT_CAP:
            latest, count = instant, count + 1
        else:  # a minutely task down for years: stop counting, jump straight past now
            return Due(first, latest, count, next_after(task.cron, zone(task.timezone), now))
    raise AssertionError("occurrences() never ends")


def tick(*, now: datetime | None = None, limit: int = 1000) -> list[TaskRun]:
    """Record the runs of the due tasks; returns the runs recorded now. The tick:
    1. selects enabled tasks whose `next_run_at` has passed, by the indexed column (no cron is evaluated for
       a task that is not due);
    2. locks them (`skip_locked`: rows another tick holds are left to it), walks each task's occurrences from
       `next_run_at` to now, and records one run a task:
       - one occurrence, at most `grace` old: a `schedule` run for it;
       - several, or one older than that (the scheduler was down): the task's `missed` policy, once —
         `run_once` queues one `catch_up` run, `skip` records one `skipped` run saying what was missed;
       - the task's previous run still queued or running, or its owner inactive: a `skipped` run saying why;
    3. inserts the runs under the `(task, scheduled_for)` unique constraint (a race's loser inserts nothing),
       advances `next_run_at` past now, trims each task's history to its last 100 runs, and enqueues the
       queued runs after commit.

    One transaction for the batch: the due tasks are selected by the indexed next_run_at and locked
    (`skip_locked`: rows another tick holds are its own), one query finds their active runs, the runs are
    inserted at once under the unique constraint (a row another tick inserted first is not inserted again),
    and the tasks advance at once. At most `limit` tasks a tick; the rest stay due for the next one.
    """
    now = now or timezone.now()
    with transaction.atomic():
        # Only what the tick reads: the owner's is_active rides along as owner_active (no user rows built).
        tasks = list(ScheduledTask.objects.select_for_update(skip_locked=True, of=("self",))
                     .only("id", "cron", "timezone", "missed", "next_run_at", "last_run_at")
                     .annotate(owner_active=F("owner__is_active"))
                     .filter(enabled=True, next_run_at__lte=now).order_by("next_run_at")[:limit])
        if not tasks:
            return []
        active = dict(TaskRun.objects.filter(task__in=tasks, status__in=TaskRun.ACTIVE)
                      .values_list("task_id", "status"))
        walks = _thread_walks()  # parsed expressions, kept from tick to tick: parsing costs twice a step
        dues: dict = {}  # tasks on one schedule, due since one instant, share one walk (a daily 09:00 for many)
        planned = [(task, _due_shared(task, now=now, walks=walks, dues=dues)) for task in tasks]
        runs = [_run_for(task, due, now=now, active=active.get(task.pk)) for task, due in planned]
        _insert_runs(runs)
        recorded = set(TaskRun.objects.filter(pk__in=[run.pk for run in runs]).values_list("pk", flat=True))
        for (task, due), run in zip(planned, runs, strict=True):
            task.next_run_at = due.following
            if run.pk in recorded and run.status == TaskRun.QUEUED:
                task.last_run_at = due.latest
        _advance(tasks, now=now)
        runs = [run for run in runs if run.pk in recorded]
        _trim_histories({run.task_id for run in runs})
        _enqueue([run for run in runs if run.status == TaskRun.QUEUED])
    if len(runs) < len(tasks):
        logger.info("Scheduler tick: %d occurrence(s) were already recorded by another tick", len(tasks) - len(runs))
    logger.info("Scheduler tick: %d run(s) recorded for %d due task(s)", len(runs), len(tasks))
    return runs


_local = threading.local()
WALKS_KEPT = 10_000


def _thread_walks() -> dict:
    """This thread's parsed cron expressions (a walk is stateful, so threads never share one)."""
    walks = getattr(_local, "walks", None)
    if walks is None or len(walks) > WALKS_KEPT:
        walks = _local.walks = {}
    return walks


def _due_shared(task: ScheduledTask, *, now: datetime, walks: dict, dues: dict) -> Due:
    key = (task.cron, task.timezone, task.next_run_at)
    due = dues.get(key)
    if due is None:
        due = dues[key] = due_occurrences(task, now=now, walks=walks)
    return due


def _advance(tasks: list[ScheduledTask], *, now: datetime) -> None:
    """Store each task's next_run_at and last_run_at with one prepared statement (bulk_update's CASE
    expressions cost more than the rest of a tick)."""
    fields = [ScheduledTask._meta.get_field(name) for name in ("next_run_at", "last_run_at", "updated_at", "id")]
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(field.column)} = %s" for field in fields[:3])
    statement = (f"UPDATE {quote(ScheduledTask._meta.db_table)} SET {assignments} "
                 f"WHERE {quote(fields[3].column)} = %s")
    rows = _prepared(fields, [(task.next_run_at, task.last_run_at, now, task.pk) for task in tasks])
    with connection.cursor() as cursor:
        cursor.executemany(statement, rows)


def _insert_runs(runs: list[TaskRun]) -> None:
    """Insert the runs with one prepared statement; a run whose occurrence another tick recorded first is
    not inserted (the unique constraint, ON CONFLICT DO NOTHING). bulk_create spends longer than the rest
    of a tick turning the same few values into parameters again and again."""
    fields = list(TaskRun._meta.concrete_fields)
    created = timezone.now()  # the wall clock, as auto_now_add would (now may be a test's clock)
    for run in runs:
        run.created_at = created
    quote = connection.ops.quote_name
    insert = connection.ops.insert_statement(on_conflict=OnConflict.IGNORE)
    suffix = connection.ops.on_conflict_suffix_sql(fields, OnConflict.IGNORE, None, None)
    statement = (f"{insert} {quote(TaskRun._meta.db_table)} ({', '.join(quote(field.column) for field in fields)}) "
                 f"VALUES ({', '.join(['%s'] * len(fields))}) {suffix}")
    rows = _prepared(fields, [tuple(getattr(run, field.attname) for field in fields) for run in runs])
    with connection.cursor() as cursor:
        cursor.executemany(statement, rows)


def _prepared(fields: list, rows: list[tuple]) -> list[tuple]:
    """Rows of Python values as database parameters; a value repeated across rows (the tick's now, a shared
    occurrence, a status) is converted once."""
    seen: dict = {}

    def prepare(field: Any, value: Any) -> Any:
        key = (field.attname, value)
        try:
            return seen[key]
        except KeyError:
            prepared = seen[key] = field.get_db_prep_save(value, connection)
            return prepared
        except TypeError:  # an unhashable value
            return field.get_db_prep_save(value, connection)

    return [tuple(prepare(field, value) for field, value in zip(fields, row, strict=True)) for row in rows]


def _run_for(task: ScheduledTask, due: Due, *, now: datetime, active: str | None) -> TaskRun:
    on_time = due.on_time(now)
    run = TaskRun(task=task, trigger=TaskRun.SCHEDULE if on_time else TaskRun.CATCH_UP, scheduled_for=due.latest,
                  status=TaskRun.QUEUED)
    reason = _skip_reason(task, due, on_time=on_time, active=active)
    if reason:
        run.status, run.error, run.finished_at = TaskRun.SKIPPED, reason, now
    return run


def _skip_reason(task: ScheduledTask, due: Due, *, on_time: bool, active: str | None) -> str:
    if not task.owner_active:  # annotated by tick()
        return "The task's owner is inactive."
    if active is not None:
        return f"The previous run was still {active}."
    if not on_time and task.missed == ScheduledTask.SKIP:
        count = f"{due.count}{'+' if due.count >= COUNT_CAP else ''}"
        return (f"{count} occurrence(s) from {due.first.isoformat()} to {due.latest.isoformat()} were missed while "
                "the scheduler was not running; the task's missed policy is skip.")
    return ""


def _trim_histories(task_ids: set[Any]) -> None:
    """Keep each task's last HISTORY_KEPT runs (only tasks that have more are touched)."""
    over = (TaskRun.objects.filter(task_id__in=task_ids).values("task_id").annotate(runs=Count("id"))
            .filter(runs__gt=HISTORY_KEPT).values_list("task_id", flat=True))
    for task_id in over:
        keep = TaskRun.objects.filter(task_id=task_id).order_by("-created_at").values_list("pk", flat=True)
        TaskRun.objects.filter(task_id=task_id).exclude(pk__in=list(keep[:HISTORY_KEPT])).delete()


def _enqueue(runs: list[TaskRun]) -> None:
    """Hand queued runs to the task cluster with the transaction that recorded them (agentsite.core.taskqueue), in
    chunks that one worker runs side by side (scheduler.tasks.task_runs_execute).

    Runs due together start together: they are spread evenly over the cluster's workers, in chunks of at
    least AGENTSITE_SCHEDULER_RUN_CONCURRENCY (a chunk queued behind another would wait for that one's runs,
    which are LLM calls of seconds, and start late)."""
    ids = [str(run.pk) for run in runs]
    workers = max(1, int(settings.Q_CLUSTER.get("workers", 1)))
    size = max(run_concurrency(), -(-len(ids) // workers))
    enqueue_with_commit("scheduler.tasks.task_runs_execute", [ids[at:at + size] for at in range(0, len(ids), size)])


# --- manual runs and run records ------------------------------------------------------------------------

@transaction.atomic
def task_run_now(*, task: ScheduledTask) -> TaskRun:
    """Queue a manual run at once (its scheduled_for is now)."""
    run = TaskRun.objects.create(task=task, trigger=TaskRun.MANUAL, scheduled_for=timezone.now())
    _trim_histories({task.pk})
    _enqueue([run])
    return run


def runs_claim(*, run_ids: list[str]) -> list[TaskRun]:
    """Move these queued runs to running with one statement (a chunk's runs start together); returns the runs
    this call claimed: not those another worker claimed first, nor those that are gone. The claim is told
    apart by its process and its exact `started_at`."""
    started, process = timezone.now(), current_process_id()
    claimed = TaskRun.objects.filter(pk__in=run_ids, status=TaskRun.QUEUED).update(
        status=TaskRun.RUNNING, started_at=started, process=process)
    if not claimed:
        return []
    runs = list(TaskRun.objects.select_related("task", "task__owner", "task__agent").filter(
        pk__in=run_ids, status=TaskRun.RUNNING, process=process, started_at=started))
    for run in runs:
        if run.trigger != TaskRun.MANUAL:  # a manual run's scheduled_for is when it was asked for
            metrics.scheduler_lag((started - run.scheduled_for).total_seconds())
    return runs


SWEPT_ERROR = "The process running this run stopped (a crash or a kill) before it finished."


def run_finish(*, run: TaskRun, status: str, output: str = "", error: str = "") -> None:
    """Store how a run ended (only a running one; a second store changes nothing). A run a peer's sweep marked
    as crashed while this process, taken for dead (its heartbeat stalled), was still running it, is still this
    process's to finish."""
    run.status, run.output, run.error, run.finished_at = status, output, error, timezone.now()
    swept_but_mine = Q(status=TaskRun.ERROR, process=current_process_id(), error=SWEPT_ERROR)
    TaskRun.objects.filter(Q(status=TaskRun.RUNNING) | swept_but_mine, pk=run.pk).update(
        status=status, output=output, error=error, finished_at=run.finished_at)


def runs_mark_crashed(dead: list[str], include_unowned: bool = False) -> int:
    """Mark the runs that these dead processes left `running` as `error` (agentsite.core.processes sweeps;
    include_unowned: runs that name no process too, left by a release before processes were recorded)."""
    owned = owned_by(dead, include_unowned)
    count = TaskRun.objects.filter(owned, status=TaskRun.RUNNING).update(
        status=TaskRun.ERROR, finished_at=timezone.now(),
        error=SWEPT_ERROR)
    if count:
        logger.warning("Marked %d scheduled run(s) left running by a stopped process as error", count)
    return count


def tick_schedule_ensure() -> str:
    """The django-q2 schedule that calls the tick: created (or corrected) at start, never by hand."""
    interval = tick_interval_s()  # whole minutes (agentsite.core.env.env_whole_minutes_s): one path, tests included
    Schedule.objects.update_or_create(name=TICK_SCHEDULE_NAME, defaults={
        "func": "scheduler.tasks.tick", "repeats": -1, "schedule_type": Schedule.MINUTES,
        "minutes": interval // 60, "cron": None})
    return f"every {interval} s"

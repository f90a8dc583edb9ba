"""django-q2 entry points of the scheduler: the tick, and one run."""

from __future__ import annotations

import asyncio
import logging

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings

from accounts.selectors import key_for_work
from agentsite.agent.usage import Caller, calling
from agentsite.core import tracing
from agentsite.core.errors import AppError
from scheduler import services
from scheduler.models import TaskRun
from scheduler.runner import runner

logger = logging.getLogger(__name__)


def tick() -> int:
    """Called by the django-q2 schedule that `scheduler.services.tick_schedule_ensure` keeps."""
    return len(services.tick())


def task_runs_execute(*run_ids: str) -> str:
    """Run queued runs concurrently, each with the injected runner within the run time limit.

    A tick spreads its runs over the workers in chunks (of at least AGENTSITE_SCHEDULER_RUN_CONCURRENCY):
    runs are mostly waits on an LLM, so one worker runs a chunk side by side instead of a cluster of a few
    workers running them one after another (100 runs due at 09:00 would otherwise drain one by one). The
    chunk's runs are claimed with one statement, so they start together. An error ends its run only.
    """
    results = async_to_sync(_execute_all)(run_ids)
    return ", ".join(results)


def task_run_execute(run_id: str) -> str:
    """One run (the entry point queued before runs were queued in chunks; kept for tasks still queued)."""
    return task_runs_execute(run_id)


async def _execute_all(run_ids: tuple[str, ...]) -> list[str]:
    # One statement claims the chunk: its runs start together, not one claim after another.
    claimed = {str(run.pk): run for run in await sync_to_async(services.runs_claim)(run_ids=list(run_ids))}
    outcomes = await asyncio.gather(*(_execute_one(run_id, claimed.get(run_id)) for run_id in run_ids),
                                    return_exceptions=True)
    results = []
    for run_id, outcome in zip(run_ids, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            if not isinstance(outcome, Exception):
                raise outcome  # a cancellation or an exit is not a run's error
            logger.error("Scheduled run %s could not be recorded", run_id, exc_info=outcome)
            outcome = f"error: {type(outcome).__name__}"
        results.append(outcome)
    return results


async def _execute_one(run_id: str, run) -> str:
    if run is None:
        return "skipped"  # claimed by another worker, or deleted

    # Its parent: the queued task's span, when the run was queued inside a trace (a manual run's request).
    with tracing.span("scheduled run", **_span_attributes(run)) as span:
        status, output, error = await _execute(run)
        tracing.annotate(span, "run_error" if status == TaskRun.ERROR else None,
                         **{"agentsite.task.run_status": status})
    await sync_to_async(services.run_finish)(run=run, status=status, output=output, error=error)
    return status if status != TaskRun.ERROR else f"error: {error[:200]}"


def _span_attributes(run) -> dict:
    """The scheduled run's span: the task, the run, when it was due and how late it started (the scheduler's lag,
    as agentsite_scheduler_lag_seconds counts it; for a manual run, its wait in the queue)."""
    started = run.started_at or run.scheduled_for
    return {"agentsite.task.id": str(run.task_id), "agentsite.task.run_id": str(run.pk),
            "agentsite.task.trigger": run.trigger, "agentsite.task.scheduled_for": run.scheduled_for.isoformat(),
            "agentsite.task.lag_s": round(max(0.0, (started - run.scheduled_for).total_seconds()), 3)}


async def _execute(run) -> tuple[str, str, str]:
    limit = float(getattr(settings, "AGENTSITE_SCHEDULER_RUN_TIMEOUT_S", 300.0))
    try:
        caller = await _caller(run.task)
        async with asyncio.timeout(limit):
            with calling(caller):  # the run's every model call counts to the task's key, else its owner
                output = await runner()(task=run.task, scheduled_for=run.scheduled_for)
    except TimeoutError:
        return TaskRun.ERROR, "", f"The run did not finish within {limit:g} s and was stopped."
    except AppError as exc:
        return TaskRun.ERROR, "", exc.message
    except Exception as exc:  # a boundary: a runner's failure is this run's error, never the cluster's
        logger.exception("Scheduled run %s failed", run.pk)
        return TaskRun.ERROR, "", f"{type(exc).__name__}: {exc}"
    return TaskRun.SUCCESS, str(output or ""), ""


async def _caller(task) -> Caller:
    """Whom a task's run acts as: the API key that wrote the task, read now (AppError 403 when it no longer
    stands: the run is recorded `error` saying so, and nothing is run), else its owner."""
    if task.created_by_key_id is None:
        return Caller(task.owner_id, facet="scheduler")

    key = await sync_to_async(key_for_work)(key_id=task.created_by_key_id)
    return Caller.with_key(task.owner_id, key, "scheduler")

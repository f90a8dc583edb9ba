"""django-q2 entry points of the scheduler: the tick, and one run."""

from __future__ import annotations

import asyncio
import logging

from asgiref.sync import async_to_sync
from django.conf import settings

logger = logging.getLogger(__name__)


def tick() -> int:
    """Called by the django-q2 schedule that `scheduler.services.tick_schedule_ensure` keeps."""
    from scheduler import services

    return len(services.tick())


def task_run_execute(run_id: str) -> str:
    """Run a queued run with the injected runner, within the run time limit. An error ends this run only."""
    from scheduler import services
    from scheduler.models import TaskRun

    run = services.run_claim(run_id=run_id)
    if run is None:
        return "skipped"  # claimed by another worker, or deleted
    status, output, error = async_to_sync(_execute)(run)
    services.run_finish(run=run, status=status, output=output, error=error)
    return status if status != TaskRun.ERROR else f"error: {error[:200]}"


async def _execute(run) -> tuple[str, str, str]:
    from agentsite.errors import AppError
    from scheduler.models import TaskRun
    from scheduler.runner import runner

    limit = float(getattr(settings, "AGENTSITE_SCHEDULER_RUN_TIMEOUT_S", 300.0))
    try:
        async with asyncio.timeout(limit):
            output = await runner()(task=run.task, scheduled_for=run.scheduled_for)
    except TimeoutError:
        return TaskRun.ERROR, "", f"The run did not finish within {limit:g} s and was stopped."
    except AppError as exc:
        return TaskRun.ERROR, "", exc.message
    except Exception as exc:  # a boundary: a runner's failure is this run's error, never the cluster's
        logger.exception("Scheduled run %s failed", run.pk)
        return TaskRun.ERROR, "", f"{type(exc).__name__}: {exc}"
    return TaskRun.SUCCESS, str(output or ""), ""

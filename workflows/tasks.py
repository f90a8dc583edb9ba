"""django-q2 entry points for workflows: the functions a queued run, an approval's timeout and the hourly
retention name by their dotted path."""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync

from workflows import approvals, runs, services

logger = logging.getLogger(__name__)


def workflow_run_task(run_id: str) -> str:
    """Run a queued run (`async: true`, or a waiting run whose approvals were decided: it resumes). A run
    another worker claimed, or one deleted meanwhile, is left alone."""
    record = services.run_claim(run_id=run_id)
    if record is None:
        logger.info("Workflow run %s was not queued any more; nothing to do", run_id)
        return "skipped"
    return async_to_sync(runs.workflow_execute)(run=record).status


def approval_timeout_task(approval_id: str) -> str:
    """The one-off schedule at an approval's expiry: decide it as its on_timeout says, unless decided."""
    return approvals.approval_time_out(approval_id=approval_id)


def workflow_runs_prune_task() -> int:
    """The hourly retention of workflow runs (services.runs_prune)."""
    return services.runs_prune()

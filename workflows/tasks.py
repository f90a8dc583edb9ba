"""django-q2 entry points for workflows."""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync

logger = logging.getLogger(__name__)


def workflow_run_task(run_id: str) -> str:
    """Run a queued run (`async: true`). A run another worker claimed, or one deleted meanwhile, is left alone."""
    from workflows import runs, services

    record = services.run_claim(run_id=run_id)
    if record is None:
        logger.info("Workflow run %s was not queued any more; nothing to do", run_id)
        return "skipped"
    return async_to_sync(runs.workflow_execute)(run=record).status

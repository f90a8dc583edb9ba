"""Refusing new user content while the data directory's disk is nearly full (AGENTSITE_MIN_FREE_MB).

A disk that fills up fails SQLite in the middle of a write and leaves uploads half written. So the writes a
user makes in bulk (uploads, knowledge-base documents, chat messages, scheduled prompts included) stop
while some room is still left: reads, logins, deletions and the server's own small bookkeeping writes go
on in that room, and deleting is how space is freed. Each of those writes calls `free_space_check` first
(a statvfs, a few microseconds).

The disk measured is the data directory's (the SQLite database, uploads); with DATABASE_URL pointing at
PostgreSQL, that server's disk is its operator's to watch.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from django.conf import settings

from agentsite.core.errors import AppError

logger = logging.getLogger(__name__)


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged process may still write on path's filesystem (path's nearest existing ancestor:
    the data directory is created by the first write)."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return shutil.disk_usage(existing).free


def free_space_check() -> None:
    """Raises AppError 507 `insufficient_storage` when the data directory's disk has less than
    AGENTSITE_MIN_FREE_MB free (0: never)."""
    minimum = settings.AGENTSITE_MIN_FREE_BYTES
    if not minimum:
        return
    data_dir = Path(settings.DATA_DIR)
    free = free_bytes(data_dir)
    if free >= minimum:
        return
    logger.warning("Refused a write: the data directory %s has %d bytes free, less than AGENTSITE_MIN_FREE_MB "
                   "(%d bytes)", data_dir, free, minimum)
    # The path goes to the log, for the operator; a user is told what happened, not where the server keeps data.
    raise AppError("insufficient_storage", f"The server's disk is nearly full: its data directory has {_mb(free)} MB "
                   f"free, less than AGENTSITE_MIN_FREE_MB ({_mb(minimum)} MB). Nothing new is stored until space is "
                   "freed; reading and deleting still work.", 507,
                   {"free_bytes": free, "min_free_bytes": minimum})


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):.1f}".removesuffix(".0")

"""Scheduler helpers for tests against a live server: make tasks due at a chosen instant, whatever the clock's minute.

Cron has minute granularity, so a task made through the API is due at a minute boundary (up to 60 s away). A
test that needs it due now writes the instant into the server's database (`next_run_at`: the tick runs an
occurrence from there, scheduled_for that instant), then wakes the timers through the API: any save of a task
is announced to every process's timer (scheduler.services.task_saved), which reads the earliest instant again.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from contextlib import closing
from datetime import UTC, datetime

import requests

from tests.server import LiveServer


def tasks_due_at(server: LiveServer, headers: dict, task_ids: Iterable[str], instant: datetime) -> None:
    """Set the tasks' next_run_at to `instant` (aware) in the server's database, then announce one of them."""
    ids = [str(task_id) for task_id in task_ids]
    utc = instant.astimezone(UTC)
    if server.database_url:
        import psycopg  # the PostgreSQL pass only

        with psycopg.connect(server.database_url, autocommit=True) as conn:
            conn.execute("UPDATE scheduler_scheduledtask SET next_run_at = %s WHERE id = ANY(%s::uuid[])", (utc, ids))
    else:
        # Django's SQLite columns: a UUID as 32 hex digits, a datetime as naive UTC text.
        stored = utc.replace(tzinfo=None).isoformat(" ", "microseconds")
        with closing(sqlite3.connect(server.data_dir / "db.sqlite3", timeout=30)) as conn, conn:
            conn.executemany("UPDATE scheduler_scheduledtask SET next_run_at = ? WHERE id = ?",
                             [(stored, task_id.replace("-", "")) for task_id in ids])
    touched = requests.patch(f"{server.base_url}/api/scheduler/tasks/{ids[0]}", headers=headers, timeout=20,
                             json={"enabled": True})  # unchanged: the instant stays, the save is announced
    assert touched.status_code == 200, touched.text
    assert datetime.fromisoformat(touched.json()["next_run_at"]) == utc, "the instant written is the task's"

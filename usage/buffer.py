"""The usage buffer: calls are added up in this process's memory and flushed into UsageDaily rows.

`add()` is what a request pays: a dict update under a lock, no I/O. A daemon thread writes what accumulated every
AGENTSITE_USAGE_FLUSH_S seconds with one additive upsert per row (processes flushing one row add up), with the
per-(day, user) and per-(day, user, agent) rollups in the same transaction; `atexit` flushes the rest, and a
failed flush is retried. Every call added is written exactly once (a SIGKILL loses at most one interval). With the
interval 0 no thread starts.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from datetime import UTC, datetime

from django.conf import settings
from django.db import connection, transaction

from agentsite.agent.usage import CallRecord

logger = logging.getLogger(__name__)

Key = tuple[str, int, str, str, str, str, str]  # day, user_id, key_id, facet, model_requested, model_answered, agent
# requests, errors, interrupted, estimated, prompt_tokens, completion_tokens, cost, latency_ms
COUNTERS = ("requests", "errors", "interrupted", "estimated", "prompt_tokens", "completion_tokens", "cost",
            "latency_ms")

# A Key's columns, in its order: the aggregate's unique row (usage.models.UsageDaily's constraint).
ROW = ("day", "user_id", "key_id", "facet", "model_requested", "model_answered", "agent")

_lock = threading.Lock()
_pending: dict[Key, list[float]] = {}
_flusher: tuple[int, threading.Thread] | None = None
_wake = threading.Event()


def interval() -> float:
    return float(getattr(settings, "AGENTSITE_USAGE_FLUSH_S", 1.0))


def add(record: CallRecord, cost: float, *, day: str | None = None) -> None:
    """Count one call (no I/O), in its row of (day, user, key, door, models, the caller's named agent)."""
    caller = record.caller
    key = (day or datetime.now(UTC).strftime("%Y-%m-%d"), caller.user_id or 0, caller.key_id, caller.facet,
           record.model_requested[:200], record.model_answered[:200], caller.agent[:64])
    with _lock:
        row = _pending.get(key)
        if row is None:
            row = _pending[key] = [0, 0, 0, 0, 0, 0, 0.0, 0]
        row[0] += 1
        row[1] += record.status == "error"
        row[2] += record.status == "interrupted"
        row[3] += not record.counted
        row[4] += record.prompt_tokens
        row[5] += record.completion_tokens
        row[6] += cost
        row[7] += round(record.latency_ms)
    if _flusher is None or _flusher[0] != os.getpid():
        _start()


def add_many(rows: dict[Key, list[float]]) -> None:
    """Add pre-summed rows (the benchmark's bulk load, and a failed flush putting its rows back)."""
    with _lock:
        for key, values in rows.items():
            row = _pending.get(key)
            if row is None:
                _pending[key] = list(values)
            else:
                for index, value in enumerate(values):
                    row[index] += value


def pending() -> int:
    """Calls counted and not yet flushed."""
    with _lock:
        return int(sum(row[0] for row in _pending.values()))


def flush() -> int:
    """Write what accumulated; returns the rows written. Thread-safe; never raises (failed rows are kept)."""
    with _lock:
        rows = dict(_pending)
        _pending.clear()
    if not rows:
        return 0
    try:
        _write(rows)
    except Exception:  # a boundary: the database may be away for a moment; nothing counted is dropped
        logger.exception("Flushing %d usage rows failed; they are retried at the next flush", len(rows))
        add_many(rows)
        return 0
    return len(rows)


_SQL = None


def _sql() -> str:
    table = "usage_usagedaily"
    columns = (*ROW, *COUNTERS)
    updates = ", ".join(f"{name} = {table}.{name} + excluded.{name}" for name in COUNTERS)
    return (f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))}) "
            f"ON CONFLICT ({', '.join(ROW)}) DO UPDATE SET {updates}")


_ROLLUP_SQL = ("INSERT INTO usage_usageuserdaily (day, user_id, requests, prompt_tokens, completion_tokens, cost) "
               "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (day, user_id) DO UPDATE SET "
               + ", ".join(f"{name} = usage_usageuserdaily.{name} + excluded.{name}"
                           for name in ("requests", "prompt_tokens", "completion_tokens", "cost")))


_AGENT_ROLLUP_SQL = (
    "INSERT INTO usage_usageagentdaily (day, user_id, agent, requests, prompt_tokens, completion_tokens, cost) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (day, user_id, agent) DO UPDATE SET "
    + ", ".join(f"{name} = usage_usageagentdaily.{name} + excluded.{name}"
                for name in ("requests", "prompt_tokens", "completion_tokens", "cost")))


def _rolled_up(rows: dict[Key, list[float]], columns: tuple[int, ...]) -> list[tuple]:
    """The rows summed per the key's `columns` (requests, prompt and completion tokens, cost), in key order (two
    processes lock rows in the same order)."""
    sums: dict[tuple, list[float]] = {}
    for key, values in rows.items():
        row = sums.setdefault(tuple(key[index] for index in columns), [0, 0, 0, 0.0])
        row[0] += values[0]
        row[1] += values[4]
        row[2] += values[5]
        row[3] += values[6]
    return [(*group, int(n), int(p), int(c), float(cost)) for group, (n, p, c, cost) in sorted(sums.items())]


def _write(rows: dict[Key, list[float]]) -> None:
    """The rows, the per-(day, user) rollup and the per-(day, user, agent) rollup, in one transaction."""
    params = [(*key, *(int(v) if index != 6 else float(v) for index, v in enumerate(values)))
              for key, values in sorted(rows.items())]  # sorted: two processes lock rows in the same order
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(_sql(), params)
        cursor.executemany(_ROLLUP_SQL, _rolled_up(rows, (0, 1)))
        cursor.executemany(_AGENT_ROLLUP_SQL, _rolled_up(rows, (0, 1, 6)))


def _loop() -> None:
    while True:
        _wake.wait(interval())
        _wake.clear()
        flush()
        connection.close_if_unusable_or_obsolete()


def _start() -> None:
    global _flusher
    with _lock:
        if _flusher is not None and _flusher[0] == os.getpid():
            return
        if interval() <= 0:
            _flusher = (os.getpid(), threading.current_thread())  # no thread: flushed by hand (tests)
            return
        thread = threading.Thread(target=_loop, name="usage-flusher", daemon=True)
        _flusher = (os.getpid(), thread)
    thread.start()
    atexit.register(_at_exit)


def _at_exit() -> None:
    if _flusher is not None and _flusher[0] == os.getpid():
        flush()

"""Database work from async code, on a few threads that keep their connections.

`await db(fn, *args, **kwargs)` runs the sync `fn` (ORM work) on a pool of AGENTSITE_DB_THREADS threads and
returns its result. Django's own `sync_to_async` runs such work on a thread of the request's own (its
ThreadSensitiveContext), so every request started a thread and opened, and at its end closed, a database
connection: on SQLite that was an eighth of a workflow run's server time. A pool thread opens its
connection once and keeps it.

Contract:
- `fn` is self-contained: it opens and closes any transaction it needs (`transaction.atomic` as a block
  or a decorator), so a pool thread holds no transaction between calls;
- a connection that failed with an error other than an integrity or data error, and no longer answers,
  is closed after the call, so the next call on that thread reconnects (a restarted PostgreSQL costs one
  failed call per thread, not a broken process);
- a caller's cancellation reaches the caller at once; `fn` itself runs to its end on its thread (like
  `sync_to_async`), so a write it started is never half done;
- context variables of the caller are visible to `fn`.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def threads() -> int:
    from django.conf import settings

    return int(getattr(settings, "AGENTSITE_DB_THREADS", 4))


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(max_workers=threads(), thread_name_prefix="agentsite-db")
    return _pool


async def db(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Run fn(*args, **kwargs) (sync, database work) off the event loop; see the module docstring."""
    return await db_started(fn, *args, **kwargs)


def db_started(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> asyncio.Future[T]:
    """db(), with the work handed to a thread before this returns (a task that awaits db() starts it only at its
    first step, after whatever else the event loop had ready): a write that something waits for at once (a
    chat turn's final store, before its `done` event). Call it from the event loop."""
    context = contextvars.copy_context()
    call = functools.partial(context.run, _call, fn, args, kwargs)
    return asyncio.get_running_loop().run_in_executor(_executor(), call)


def _call(fn: Callable[..., T], args: tuple, kwargs: dict) -> T:
    try:
        return fn(*args, **kwargs)
    finally:
        _tidy()


def _tidy() -> None:
    from django.db import connections

    for connection in connections.all(initialized_only=True):
        if connection.connection is None:
            continue
        if connection.errors_occurred:
            if connection.is_usable():
                connection.errors_occurred = False
            else:
                connection.close()

"""Database work from async code, on a few threads that keep their connections.

`await db(fn, *args, **kwargs)` runs the sync `fn` on a pool of AGENTSITE_DB_THREADS threads, each opening its
connection once, instead of a thread (and a connection) per request as `sync_to_async` does.

Contract: `fn` opens and closes any transaction it needs; a connection that failed and no longer answers is
closed after the call, so the thread reconnects; a caller's cancellation reaches it at once while `fn` runs to
its end on its thread; the caller's context variables are visible to `fn`.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from django.conf import settings
from django.db import connections

T = TypeVar("T")

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def threads() -> int:
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
    for connection in connections.all(initialized_only=True):
        if connection.connection is None:
            continue
        if connection.errors_occurred:
            if connection.is_usable():
                connection.errors_occurred = False
            else:
                connection.close()

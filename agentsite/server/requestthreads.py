"""Each HTTP request's sync work on a reused thread that keeps its database connection.

Django runs a request's sync parts (sync views and middleware, the request signals' receivers, closing
the response, `sync_to_async` calls of async views) on a thread of that request's own: asgiref's
ThreadSensitiveContext starts one the first time and joins it when the request ends. Every request
therefore started and joined a thread and, since Django's connections belong to threads, opened and closed
a database connection: most of the server's time for a small request (bench/RESULTS.md).

`ReusedRequestThreads` lends each request an idle single-thread executor instead. What stays the same:
one request's sync code runs on one thread, one call at a time, and a task that outlives its request
(the MCP session manager, started by the first MCP request) gets a thread of its own when it next calls
sync code, as before. What changes: the thread, and with it the connection (CONN_MAX_AGE=None, settings),
serves one request after another.

Invariants (tests/foundation/test_requestthreads.py):
- a lent executor serves one request at a time;
- a request that ended while its sync call was still running (a client hung up) hands the executor back at
  once; the next borrower's first call runs after that call, on the same thread, never beside it;
- at most KEEP executors wait idle; one more is shut down after its thread closed its connections.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import SyncToAsync, ThreadSensitiveContext

KEEP = 16


def _close_connections() -> None:
    from django.db import connections

    connections.close_all()


class ReusedRequestThreads:
    """ASGI middleware for the Django app: see the module docstring."""

    def __init__(self, app: Any, keep: int = KEEP):
        self.app = app
        self.keep = keep
        self.idle: list[ThreadPoolExecutor] = []
        self.made = 0

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        executor = self._borrow()
        context = ThreadSensitiveContext()
        try:
            async with context:
                # The outermost context is this one (Django's own, inside, then leaves it alone); its sync
                # calls go to the lent executor. Taken back out before the context ends, so asgiref does not
                # shut it down, and a task that outlives the request gets a new thread as it would have.
                SyncToAsync.context_to_thread_executor[context] = executor
                try:
                    await self.app(scope, receive, send)
                finally:
                    SyncToAsync.context_to_thread_executor.pop(context, None)
        finally:
            self._give_back(executor)

    def _borrow(self) -> ThreadPoolExecutor:
        if self.idle:
            return self.idle.pop()
        self.made += 1
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentsite-request")

    def _give_back(self, executor: ThreadPoolExecutor) -> None:
        if len(self.idle) < self.keep:
            self.idle.append(executor)
            return
        executor.submit(_close_connections)
        executor.shutdown(wait=False)

"""Each HTTP request's sync work on a reused thread that keeps its database connection.

Django runs a request's sync parts on a thread of that request's own (asgiref's ThreadSensitiveContext), so every
request started a thread and opened and closed a database connection. `ReusedRequestThreads` lends each request
an idle single-thread executor instead: one request's sync code still runs on one thread, one call at a time, but
the thread and its connection serve one request after another. A request that ended while its sync call still
ran hands the executor back at once; the next borrower's first call runs after that call, never beside it.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import SyncToAsync, ThreadSensitiveContext
from django.db import connections

KEEP = 16


def _close_connections() -> None:
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

"""This process's MCP client connections, by server name.

Connections run on an event loop of their own in a daemon thread, so they outlive the loop that asked for
them: a request under daphne, a q2 task's `async_to_sync`, a management command. Nothing here touches the
database; callers read the stored server records and write status changes back (see `mcpbridge.services`).
A server disconnected through any process is let go in every process that holds a connection to it: the
disconnect announces SERVER_TOPIC (agentsite.core.invalidation), and a process that started its manager
listens for it.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Callable, Coroutine, Set
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from agentsite.core import invalidation
from mcpbridge.connection import (
    CALL_TIMEOUT_S,
    CLOSE_TIMEOUT_S,
    CONNECT_TIMEOUT_S,
    McpCallTimeout,
    McpConnectError,
    McpConnection,
    McpServerLost,
    ServerSpec,
)

if TYPE_CHECKING:
    import mcp_types as types

__all__ = ["CALL_TIMEOUT_S", "CLOSE_TIMEOUT_S", "CONNECT_TIMEOUT_S", "ConnectionManager", "ConnectionState",
           "McpCallTimeout", "McpConnectError", "McpServerLost", "ServerSpec", "manager"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
SERVER_TOPIC = "mcp.server"  # announced with a server's name when it is disconnected
RETRY_AFTER_S = 10.0  # a server that failed to connect is not retried by listings for this long


@dataclass(frozen=True)
class ConnectionState:
    status: str  # connecting | connected | error | closed
    error: str
    tools: list[types.Tool]


class ConnectionManager:
    """This process's connections by server name, on a loop in a daemon thread. Safe to call from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid: int | None = None
        self._connections: dict[str, McpConnection] = {}
        self._opening: dict[str, asyncio.Task[McpConnection]] = {}
        self._failed_at: dict[str, float] = {}

    # Crossing into the manager's loop.

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            # After a fork (q2 starts its workers so) the thread is gone: start afresh, forget the parent's state.
            if self._loop is None or self._pid != os.getpid():
                # Before the first connection: a disconnect announced from now on reaches this process.
                invalidation.listen()
                self._connections, self._opening, self._failed_at = {}, {}, {}
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="mcp-client-loop", daemon=True)
                thread.start()
                self._loop, self._pid = loop, os.getpid()
            return self._loop

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self._running_loop())

    async def run(self, factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run a coroutine on the manager's loop from any other loop; cancelling the caller cancels it."""
        return await asyncio.wrap_future(self.submit(factory()))

    def run_sync(self, factory: Callable[[], Coroutine[Any, Any, T]], timeout: float | None = None) -> T:
        """Run a coroutine on the manager's loop from sync code (not from the manager's own thread)."""
        return self.submit(factory()).result(timeout)

    # Reads, safe from any thread (plain attribute reads of the connection).

    def names(self) -> set[str]:
        """The servers this process holds a connection (or a failed attempt) for."""
        return set(self._connections) if self._pid == os.getpid() else set()

    def state(self, name: str) -> ConnectionState | None:
        connection = self._connections.get(name) if self._pid == os.getpid() else None
        if connection is None:
            return None
        return ConnectionState(connection.status, connection.error, list(connection.tools))

    # Operations: coroutines for the manager's loop; call them through run()/run_sync().

    async def connect(self, spec: ServerSpec) -> list[types.Tool]:
        """A fresh connection (one of that name is closed first, one being opened abandoned); raises
        McpConnectError. It stays `pending` (retain() leaves it alone) until the caller stored it and confirms.
        """
        opening = self._opening.pop(spec.name, None)
        if opening is not None:
            opening.cancel()
        try:
            connection = await self._open(spec, pending=True)
        except McpConnectError:
            if spec.name not in self._opening:  # unless a newer connect of this name has taken over
                await self.disconnect(spec.name)  # nothing was stored: keep no trace of the attempt
            raise
        return list(connection.tools)

    async def confirm(self, name: str) -> None:
        connection = self._connections.get(name)
        if connection is not None:
            connection.pending = False

    async def ensure(self, spec: ServerSpec, *, retry_failed: bool = True) -> McpConnection:
        """The live connection for spec, reconnecting when it is gone, failed or its spec changed.

        With retry_failed False, a server whose last attempt failed within RETRY_AFTER_S is not tried again
        (a listing must not spawn a broken server on every turn). Raises McpConnectError.
        """
        connection = self._connections.get(spec.name)
        if connection is not None and connection.alive and connection.spec == spec:
            return connection
        opening = self._opening.get(spec.name)
        if opening is not None:
            return await _joined(spec.name, opening)
        failed_at = self._failed_at.get(spec.name)
        if not retry_failed and failed_at is not None and time.monotonic() - failed_at < RETRY_AFTER_S:
            raise McpConnectError(connection.error if connection else "The last connection attempt failed.")
        return await self._open(spec)

    async def _open(self, spec: ServerSpec, *, pending: bool = False) -> McpConnection:
        # Nothing is awaited before the opening task is registered, so concurrent callers share one attempt.
        previous = self._connections.get(spec.name)
        connection = McpConnection(spec)
        connection.pending = pending
        self._connections[spec.name] = connection

        async def opening() -> McpConnection:
            if previous is not None:
                await previous.close()
            try:
                await connection.open()
            except McpConnectError:
                self._failed_at[spec.name] = time.monotonic()
                raise
            self._failed_at.pop(spec.name, None)
            logger.info("Connected to MCP server %r (%s, %d tools)", spec.name, spec.transport,
                        len(connection.tools))
            return connection

        task = asyncio.ensure_future(opening())
        self._opening[spec.name] = task
        task.add_done_callback(lambda done: self._opened(spec.name, done))
        return await _joined(spec.name, task)

    def _opened(self, name: str, task: asyncio.Task[McpConnection]) -> None:
        if self._opening.get(name) is task:
            del self._opening[name]
        if not task.cancelled():
            task.exception()  # a caller that gave up waiting must not leave the failure unretrieved

    async def call(self, spec: ServerSpec, tool: str, arguments: dict[str, Any],
                   timeout: float = CALL_TIMEOUT_S) -> types.CallToolResult:
        """Call a tool, reconnecting first if the server is gone (a crash, a restart of this service).

        Raises McpConnectError (cannot reconnect), McpServerLost (died during the call), McpCallTimeout.
        """
        connection = await self.ensure(spec)
        return await connection.call(tool, arguments, timeout)

    async def disconnect(self, name: str) -> bool:
        """Close the named connection, if this process has one. True when there was one."""
        self._failed_at.pop(name, None)
        opening = self._opening.pop(name, None)
        if opening is not None:
            opening.cancel()
        connection = self._connections.pop(name, None)
        if connection is None:
            return False
        await connection.close()
        return True

    async def retain(self, names: Set[str]) -> None:
        """Close the connections to servers not named (removed by another process since they were opened)."""
        gone = [name for name, connection in list(self._connections.items())
                if name not in names and not connection.pending]
        await asyncio.gather(*(self.disconnect(name) for name in gone), return_exceptions=True)

    async def disconnect_all(self) -> None:
        await asyncio.gather(*(self.disconnect(name) for name in list(self._connections)), return_exceptions=True)

    def shutdown(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """Close every connection (stopping stdio servers); for interpreter exit."""
        if self._loop is None or self._pid != os.getpid() or not self._connections:
            return
        try:
            self.submit(self.disconnect_all()).result(timeout)
        except Exception:  # exiting anyway: say so, do not raise from atexit
            logger.warning("MCP client connections did not all close at exit", exc_info=True)


async def _joined(name: str, opening: asyncio.Task[McpConnection]) -> McpConnection:
    """Wait for an opening that several callers share. A disconnect (or another connect) cancels the opening
    itself: its waiters then get McpConnectError, not a CancelledError they would take for their own (a request
    handler cancelled so never answers)."""
    try:
        return await asyncio.shield(opening)
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if opening.cancelled() and current is not None and not current.cancelling():
            raise McpConnectError(f"The connection to MCP server {name!r} was closed while it was being opened "
                                  "(disconnected, or its authorization was withdrawn).") from None
        raise


manager = ConnectionManager()
atexit.register(manager.shutdown)


def let_go(name: str | None) -> None:
    """SERVER_TOPIC's subscriber: close this process's connection to a server another process disconnected (a
    stdio server's process tree stops). Cheap and never raises: it runs on the invalidation listener's thread.
    None (announcements may have been missed) closes nothing: the next listing lets go of what is no longer
    stored (ConnectionManager.retain)."""
    if name is None or name not in manager.names():
        return
    try:
        manager.submit(manager.disconnect(name))
    except Exception:  # noqa: BLE001 - a boundary: the next listing's retain() closes it instead
        logger.warning("Could not close the connection to the disconnected MCP server %r", name, exc_info=True)


invalidation.subscribe(SERVER_TOPIC, let_go)

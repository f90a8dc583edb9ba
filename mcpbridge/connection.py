"""One MCP client connection: a long-lived session with one external server (stdio, SSE or Streamable HTTP).

A connection is one asyncio task that enters the transport and the `ClientSession`, completes the
handshake, lists the tools, and then waits until it is closed or the server goes away (a stdio server
exiting, a stream closing). Anyio's task groups must be left by the task that entered them, hence the task.
`mcpbridge.client` holds this process's connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import tempfile
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Literal

import anyio

if TYPE_CHECKING:
    import mcp_types as types
    from mcp import ClientSession

# The mcp package takes half a second to import: it is imported when a connection opens, not by every process
# that loads the apps (manage.py commands, q2 workers that never call an MCP tool).

logger = logging.getLogger(__name__)

Transport = Literal["stdio", "sse", "streamable-http"]

CONNECT_TIMEOUT_S = 20.0  # spawn (or HTTP connect) + initialize + tools/list
CALL_TIMEOUT_S = 60.0
CLOSE_TIMEOUT_S = 8.0  # the stdio transport itself allows 2 s + 2 s + 2 s to stop a server process
STDERR_TAIL_BYTES = 2000
HTTP_ERROR_BODY_BYTES = 4096
CONNECTION_CLOSED = -32000  # JSON-RPC code the SDK gives every request pending when a connection ends


class McpConnectError(Exception):
    """The server could not be started or reached, or did not complete the handshake; str() says why."""


class McpServerLost(Exception):
    """The server went away (exited, closed its stream) before or during a call; str() says why."""


class McpCallTimeout(Exception):
    """The server did not answer a call within its time limit."""


@dataclass(frozen=True)
class ServerSpec:
    """How to reach one server: a command for stdio, a URL (and headers) for the HTTP transports."""

    name: str
    transport: Transport
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict, repr=False)  # may hold secrets
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict, repr=False)  # may hold a bearer token
    # An httpx2.Auth for every request of a URL server (an OAuth server's: mcpbridge.oauthgrant.OAuthBearer). Not
    # compared: it reads the current token itself, so a refreshed token is no reason to reconnect.
    auth: Any = field(default=None, repr=False, compare=False)


class McpConnection:
    """One session with one server. Create and use it only on the manager's loop."""

    def __init__(self, spec: ServerSpec):
        self.spec = spec
        self.status: Literal["connecting", "connected", "error", "closed"] = "connecting"
        self.error = ""
        self.tools: list[types.Tool] = []
        self.pending = False  # opened by connect(), not yet stored by the caller
        self._session: ClientSession | None = None
        self._stop = asyncio.Event()
        self._lost = asyncio.Event()
        self._done = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stderr: IO[bytes] | None = None
        self._tail = ""  # the stderr tail, kept when the file is closed
        self._http_error = ""  # the last error response of a URL server
        self._process_group: int | None = None  # a stdio server's (it leads a session of its own)

    @property
    def alive(self) -> bool:
        return self.status == "connected" and not self._lost.is_set()

    async def open(self, timeout: float = CONNECT_TIMEOUT_S) -> None:
        """Connect, shake hands and list the tools. Raises McpConnectError with the server's own reason."""
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._run(ready), name=f"mcp-client:{self.spec.name}")
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(ready)
        except TimeoutError:
            await self._abort()
            self.status, self.error = "error", _with_tail(
                f"The server did not complete the MCP handshake within {timeout:g} s.", self._stderr_tail())
            raise McpConnectError(self.error) from None
        except asyncio.CancelledError:
            await self._abort()
            raise
        finally:
            if ready.done() and not ready.cancelled():
                ready.exception()  # retrieved here, so asyncio does not report it as lost

    async def _abort(self) -> None:
        self._stop.set()
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task

    async def close(self) -> None:
        """Close the session; a stdio server's process tree is stopped with it."""
        self._stop.set()
        if self._task is None or self._task.done():
            return
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await self._done.wait()
        except TimeoutError:
            logger.warning("MCP server %r did not close within %g s; cancelling", self.spec.name, CLOSE_TIMEOUT_S)
            await self._abort()

    async def call(self, tool: str, arguments: dict[str, Any], timeout: float) -> types.CallToolResult:
        """Call a tool. Raises McpServerLost, McpCallTimeout; an MCP error answer comes back as an error result."""
        # Start-up cost: the mcp package takes half a second to import; only a process that connects pays it.
        import mcp_types as types
        from mcp.shared.exceptions import MCPError

        session = self._session
        if session is None or not self.alive:
            raise McpServerLost(self.error or f"The MCP server {self.spec.name!r} is not connected.")
        try:
            return await session.call_tool(tool, arguments, read_timeout_seconds=timeout)
        except MCPError as exc:
            if exc.code == types.REQUEST_TIMEOUT:
                raise McpCallTimeout(f"The MCP server {self.spec.name!r} did not answer {tool} within "
                                     f"{timeout:g} s.") from None
            if exc.code == CONNECTION_CLOSED:
                raise McpServerLost(await self._lost_reason(during=tool)) from None
            # Any other error code is the server's own answer (unknown tool, bad params): the model reads it.
            return types.CallToolResult(content=[types.TextContent(text=f"MCP error {exc.code}: {exc.message}")],
                                        is_error=True)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError) as exc:
            self._lost.set()
            raise McpServerLost(await self._lost_reason(during=tool, cause=exc)) from None

    async def _lost_reason(self, *, during: str, cause: BaseException | None = None) -> str:
        # Let the runner finish first: it stops the process, so the stderr tail is complete.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await self._done.wait()
        if self.status != "error":
            self.status = "error"
            self.error = _with_tail(f"The MCP server {self.spec.name!r} closed the connection"
                                    + (f" ({describe(cause)})" if cause else "") + ".", self._stderr_tail())
        return f"The MCP server {self.spec.name!r} went away during {during}: {self.error}"

    async def _run(self, ready: asyncio.Future[None]) -> None:
        # Start-up cost: the mcp package takes half a second to import; only a process that connects pays it.
        from mcp import ClientSession

        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await self._enter_transport(stack)
                session = await stack.enter_async_context(ClientSession(_WatchedReadStream(read, self._lost), write))
                await session.initialize()
                self.tools = await _list_all_tools(session)
                self._session, self.status = session, "connected"
                ready.set_result(None)
                await _first_of(self._stop.wait(), self._lost.wait())
                if not self._stop.is_set():
                    logger.warning("MCP server %r closed the connection", self.spec.name)
        except BaseException as exc:  # a boundary: every failure becomes the server's status
            message = self._reason(exc)
            if not ready.done():
                self.status, self.error = "error", message
                ready.set_exception(McpConnectError(message))
            elif not self._stop.is_set():
                logger.warning("MCP server %r failed: %s", self.spec.name, message)
                self.status, self.error = "error", message
            if isinstance(exc, asyncio.CancelledError) and not self._stop.is_set():
                raise
        else:
            if self._stop.is_set():
                self.status = "closed"
            else:
                self.status = "error"
                self.error = _with_tail(f"The MCP server {self.spec.name!r} closed the connection.",
                                        self._stderr_tail())
        finally:
            self._session = None
            self._lost.set()
            self._done.set()
            if self._stderr is not None:
                self._tail = self._stderr_tail()
                self._stderr.close()

    async def _enter_transport(self, stack: contextlib.AsyncExitStack) -> tuple[Any, Any]:
        if self.spec.transport != "stdio":
            return await stack.enter_async_context(self._transport())
        # Registered first so that it runs last: after the SDK has closed stdin and waited for the server.
        stack.callback(self._kill_process_group)
        # The SDK does not tell us the server's pid, and kills its process group only when the server outlives
        # the 2 s grace after stdin closes; a server that exits on EOF may leave its children (an npx-started
        # node, a shell's pipeline) running. The new session leader among our children is the server: spawns
        # are serialized so that there is exactly one.
        async with _spawn_lock():
            before = _session_leader_children()
            streams = await stack.enter_async_context(self._transport())
            spawned = _session_leader_children() - before
        self._process_group = spawned.pop() if len(spawned) == 1 else None
        return streams

    def _kill_process_group(self) -> None:
        if self._process_group is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process_group, signal.SIGKILL)

    def _transport(self) -> contextlib.AbstractAsyncContextManager:
        # Start-up cost: the mcp package takes half a second to import; only a process that connects pays it.
        from mcp.client.sse import sse_client
        from mcp.client.stdio import StdioServerParameters, stdio_client

        spec = self.spec
        if spec.transport == "stdio":
            # A file, not a pipe: the server writes as much stderr as it likes and nobody has to drain it.
            self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed when the runner ends
            params = StdioServerParameters(command=spec.command, args=list(spec.args), env=dict(spec.env) or None)
            return stdio_client(params, errlog=self._stderr)  # type: ignore[arg-type]
        if spec.transport == "sse":
            return sse_client(spec.url, headers=dict(spec.headers) or None, timeout=CONNECT_TIMEOUT_S,
                              httpx_client_factory=self._http_client)
        return self._streamable_http()

    @contextlib.asynccontextmanager
    async def _streamable_http(self) -> AsyncIterator[Any]:
        # Start-up cost: the mcp package takes half a second to import; only a process that connects pays it.
        from mcp.client.streamable_http import streamable_http_client

        async with self._http_client(headers=dict(self.spec.headers) or None) as http_client:
            async with streamable_http_client(self.spec.url, http_client=http_client) as streams:
                yield streams

    def _http_client(self, headers: dict[str, str] | None = None, timeout: Any = None, auth: Any = None) -> Any:
        """The SDK's client, noting error responses: the SDK reports a refused handshake without its status."""
        # The transport module's public name for it (mcp.shared._httpx_utils is private).
        from mcp.client.streamable_http import create_mcp_http_client

        client = create_mcp_http_client(headers=headers, timeout=timeout, auth=auth or self.spec.auth)
        client.event_hooks = {"response": [self._note_http_error]}
        return client

    async def _note_http_error(self, response: Any) -> None:
        if response.status_code < 400:
            return
        detail = ""
        if int(response.headers.get("content-length") or HTTP_ERROR_BODY_BYTES + 1) <= HTTP_ERROR_BODY_BYTES:
            await response.aread()
            detail = " ".join(response.text.split())[:300]
        self._http_error = f"HTTP {response.status_code} from {response.request.url}" + (f": {detail}" * bool(detail))

    def _reason(self, exc: BaseException) -> str:
        message = spawn_problem(self.spec, exc) or describe(exc)
        if self._http_error and self._http_error not in message:
            message = f"{message} ({self._http_error})"
        return _with_tail(message, self._stderr_tail())

    def _stderr_tail(self) -> str:
        if self._stderr is None or self._stderr.closed:
            return self._tail
        try:
            fd = self._stderr.fileno()
            size = os.fstat(fd).st_size
            # pread leaves the shared file offset alone: the child writes through the same open file.
            data = os.pread(fd, STDERR_TAIL_BYTES, max(0, size - STDERR_TAIL_BYTES))
        except OSError:
            return ""
        return data.decode("utf-8", errors="replace").strip()


class _WatchedReadStream:
    """The session's read stream, which sets `lost` when the server's side ends (EOF or a closed stream)."""

    def __init__(self, inner: Any, lost: asyncio.Event):
        self._inner = inner
        self._lost = lost

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._lost.set()
            raise

    def __aiter__(self) -> _WatchedReadStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _WatchedReadStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


_spawn_locks: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}


def _spawn_lock() -> asyncio.Lock:
    loop = asyncio.get_running_loop()
    return _spawn_locks.setdefault(loop, asyncio.Lock())


def _session_leader_children() -> set[int]:
    """Pids of this process's children that lead a session of their own (how the SDK starts stdio servers)."""
    me, found = os.getpid(), set()
    try:
        entries = os.listdir("/proc")
    except OSError:  # no procfs: the SDK's own clean-up is all there is
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == me and int(fields[3]) == int(entry):
            found.add(int(entry))
    return found


async def _list_all_tools(session: ClientSession) -> list[types.Tool]:
    # Start-up cost: the mcp package takes half a second to import; only a process that connects pays it.
    import mcp_types as types

    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(100):  # a server that pages forever is cut off rather than followed
        result = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools.extend(result.tools)
        cursor = result.next_cursor
        if not cursor:
            break
    return tools


async def _first_of(*waits: Awaitable[Any]) -> None:
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


def describe(exc: BaseException | None) -> str:
    """The leaf errors of an exception (groups flattened), as one line a person can read."""
    # Start-up cost: the mcp package takes half a second to import; only a process that connects pays it.
    from mcp.shared.exceptions import MCPError

    if exc is None:
        return ""
    messages: list[str] = []
    for leaf in _leaves(exc):
        if isinstance(leaf, asyncio.CancelledError | GeneratorExit):
            continue
        text = str(leaf).strip()
        if isinstance(leaf, MCPError):
            text = "The server closed the connection." if leaf.code == CONNECTION_CLOSED else f"MCP error: {text}"
        elif type(leaf).__name__ not in text:
            text = f"{type(leaf).__name__}: {text}" if text else type(leaf).__name__
        if text not in messages:
            messages.append(text)
    return "; ".join(messages) or "The connection was cancelled."


def spawn_problem(spec: ServerSpec, exc: BaseException) -> str | None:
    """What to fix when a stdio server's command could not be started at all (missing, not executable)."""
    if spec.transport != "stdio":
        return None
    leaf = next((leaf for leaf in _leaves(exc) if isinstance(leaf, FileNotFoundError | PermissionError)
                 and leaf.filename in (spec.command, os.fsencode(spec.command))), None)
    if isinstance(leaf, PermissionError):
        return f"The command {spec.command!r} cannot be run: permission denied (is it an executable file?)."
    if leaf is None:
        return None
    if os.sep in spec.command:
        return f"The command {spec.command!r} does not exist."
    # The child's PATH is the one searched: the SDK passes PATH (and a few others) on, under the server's env.
    path = spec.env.get("PATH", os.environ.get("PATH", os.defpath))
    return (f"The command {spec.command!r} was not found on the PATH the server starts with ({path}): "
            "install it there, give its full path, or set PATH in the server's env.")


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _with_tail(message: str, tail: str) -> str:
    return f"{message} Server stderr: {tail}" if tail else message

"""An external MCP server's tools as the runtime's tools (`<server>__<tool>`), listed and called through the
connection manager; a failure to connect or a server that dies mid-call is recorded on the stored server."""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from agentsite.agent.agents import MCP_SEPARATOR, mcp_function_name
from agentsite.agent.tools import Tool, ToolContext, ToolResult
from agentsite.core.errors import AppError
from mcpbridge.client import CALL_TIMEOUT_S, McpCallTimeout, McpConnectError, McpServerLost, ServerSpec, manager
from mcpbridge.status import mcp_server_status_record

if TYPE_CHECKING:
    import mcp_types as types

logger = logging.getLogger(__name__)

SOURCE_NAME = "mcp"
SEPARATOR = MCP_SEPARATOR

# Set while this service serves MCP itself: it then offers its own tools only, never the external servers'
# (two services connected to each other, or to themselves, would otherwise list each other's listings).
_own_tools_only: contextvars.ContextVar[bool] = contextvars.ContextVar("mcpbridge_own_tools_only", default=False)


@dataclass(frozen=True)
class McpTool(Tool):
    """A tool of an external MCP server: `name` is `<server>__<tool>`, `remote_name` the server's own name."""

    server: str = ""
    remote_name: str = ""


def model_tool_name(server: str, tool: str) -> str:
    """`<server>__<tool>` as a function name (an agent's allowlist names it `<server>/<tool>`)."""
    return mcp_function_name(server, tool)


@contextlib.contextmanager
def own_tools_only() -> Iterator[None]:
    """Within this block (and the tasks started in it) the registry lists no external MCP tools."""
    token = _own_tools_only.set(True)
    try:
        yield
    finally:
        _own_tools_only.reset(token)


def listing_own_tools_only() -> bool:
    """Whether the registry lists no external MCP tools here (within `own_tools_only`)."""
    return _own_tools_only.get()


async def server_tools(spec: ServerSpec) -> list[McpTool]:
    """The server's tools for a listing: none while it cannot be reached (a recent failure is not retried)."""
    try:
        return [mcp_tool(spec, remote) for remote in await remote_tools(spec, retry_failed=False)]
    except McpConnectError:
        return []


async def remote_tools(spec: ServerSpec, *, retry_failed: bool = True) -> list[types.Tool]:
    """The server's own tool list, connecting first when this process has no live connection; the outcome is
    recorded on the stored server. Raises McpConnectError.
    """
    async def ensure() -> list[types.Tool]:
        return list((await manager.ensure(spec, retry_failed=retry_failed)).tools)

    try:
        tools = await manager.run(ensure)
    except McpConnectError as exc:
        await _record(spec, error=str(exc))
        raise
    await _record(spec, error="", tools=tools)
    return tools


async def _record(spec: ServerSpec, *, error: str, tools: list[types.Tool] | None = None) -> None:
    await sync_to_async(mcp_server_status_record)(name=spec.name, error=error, tools=tools)


def mcp_tool(spec: ServerSpec, remote: types.Tool) -> McpTool:
    schema = remote.input_schema if isinstance(remote.input_schema, dict) else {"type": "object"}

    async def call(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return await call_remote(spec, remote.name, arguments)

    return McpTool(name=model_tool_name(spec.name, remote.name), description=remote.description or remote.name,
                   input_schema=schema, call=call, source=SOURCE_NAME,
                   timeout=CALL_TIMEOUT_S + 5.0,  # the server's own limit answers first, with a clearer message
                   server=spec.name, remote_name=remote.name)


async def call_remote(spec: ServerSpec, tool: str, arguments: dict[str, Any]) -> ToolResult:
    """Call a tool of an external server. Raises AppError 502 `upstream_error` when the server fails (it is then
    marked `error`); the registry turns that into an error result for the model, /api/mcp/call into a 502.
    """
    # Imported on the first call: mcp_types costs half a second to import, which a process that never calls an
    # MCP tool (manage.py commands, task workers) does not pay.
    from mcpbridge.content import result_from_mcp

    try:
        result = await manager.run(lambda: manager.call(spec, tool, arguments, CALL_TIMEOUT_S))
    except (McpConnectError, McpServerLost) as exc:
        await _record(spec, error=str(exc))
        raise upstream_error(spec, exc) from None
    except McpCallTimeout as exc:
        raise upstream_error(spec, exc) from None
    return result_from_mcp(result)


def upstream_error(spec: ServerSpec, exc: Exception) -> AppError:
    return AppError("upstream_error", str(exc), 502, {"server": spec.name})

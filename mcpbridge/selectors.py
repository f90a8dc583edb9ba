"""Reads of MCP: stored servers with their live status, and every tool this service can call (aggregated)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async

from agentsite.agent.tools import Tool, ToolContext, registry
from agentsite.errors import AppError
from mcpbridge.client import McpConnectError, ServerSpec, manager
from mcpbridge.kb import KB_SEARCH_TOOL
from mcpbridge.models import McpServer
from mcpbridge.tools import McpTool, mcp_tool, own_tools_only, remote_tools, server_tools, upstream_error

# Tools the service serves over MCP and lists at /api/mcp/tools without offering them to the model.
EXTRA_TOOLS: list[Tool] = [KB_SEARCH_TOOL]


def spec_for(server: McpServer) -> ServerSpec:
    return ServerSpec(name=server.name, transport=server.transport, command=server.command,  # type: ignore[arg-type]
                      args=tuple(str(arg) for arg in server.args or ()),
                      env={str(key): str(value) for key, value in (server.env or {}).items()},
                      url=server.url, headers={str(key): str(value) for key, value in (server.headers or {}).items()})


def mcp_server_specs() -> list[ServerSpec]:
    return [spec_for(server) for server in McpServer.objects.all()]


def mcp_server_get(*, name: str) -> McpServer:
    """The stored server of this name. Raises AppError 404 `not_found`."""
    server = McpServer.objects.filter(name=name).first()
    if server is None:
        raise AppError("not_found", f"There is no MCP server named {name!r}.", 404)
    return server


@dataclass(frozen=True)
class ServerOverview:
    server: McpServer
    status: str  # connected | error
    error: str
    tool_count: int


async def mcp_server_overview() -> list[ServerOverview]:
    """Every stored server with this process's view of it; servers this process never tried are connected
    first (that is the reconnect after a start), but a failed or crashed one is left alone: it reconnects
    on its next use (a listing of tools or a call), and until then shows `error`.
    """
    servers = await sync_to_async(list)(McpServer.objects.all())
    untried = [server for server in servers if manager.state(server.name) is None]
    if untried:
        await asyncio.gather(*(server_tools(spec_for(server)) for server in untried))
        servers = await sync_to_async(list)(McpServer.objects.all())
    return [_overview(server) for server in servers]


def _overview(server: McpServer) -> ServerOverview:
    state = manager.state(server.name)
    if state is not None and state.status in ("connected", "error"):
        return ServerOverview(server, state.status, state.error, len(state.tools))
    return ServerOverview(server, server.status, server.error, len(server.tools or []))


async def tools_available(*, user_id: Any, own_only: bool = False) -> list[Tool]:
    """Every tool the service can run for this user: the registry's (built-ins, plugins, and unless own_only
    the external MCP servers'), then kb_search. First name wins, as in the registry.
    """
    ctx = ToolContext(user_id=user_id)
    if own_only:
        with own_tools_only():
            tools = await registry.list_tools(ctx, enabled_only=False)
    else:
        tools = await registry.list_tools(ctx, enabled_only=False)
    names = {tool.name for tool in tools}
    return tools + [tool for tool in EXTRA_TOOLS if tool.name not in names]


def tool_server(tool: Tool) -> str:
    """The `server` a tool is listed under: the MCP server's name, or its registry source ("builtin", a plugin)."""
    return tool.server if isinstance(tool, McpTool) else tool.source


def tool_listed_name(tool: Tool) -> str:
    return tool.remote_name if isinstance(tool, McpTool) else tool.name


async def tool_find(*, user_id: Any, server: str, tool: str) -> Tool:
    """The tool `tool` of `server` (an MCP server or a registry source). Raises AppError 404 `not_found`, and
    502 `upstream_error` when the MCP server cannot be reached (it is then marked `error`).
    """
    stored = await sync_to_async(McpServer.objects.filter(name=server).first)()
    if stored is not None:
        found = await _remote_tool(spec_for(stored), tool)
    else:
        candidates = await tools_available(user_id=user_id, own_only=True)
        found = next((item for item in candidates if item.source == server and item.name == tool), None)
    if found is None:
        raise AppError("not_found", f"There is no tool {tool!r} on the server {server!r}.", 404,
                       {"server": server, "tool": tool})
    return found


async def _remote_tool(spec: ServerSpec, name: str) -> McpTool | None:
    try:
        tools = await remote_tools(spec)
    except McpConnectError as exc:
        raise upstream_error(spec, exc) from None
    remote = next((item for item in tools if item.name == name), None)
    return mcp_tool(spec, remote) if remote is not None else None

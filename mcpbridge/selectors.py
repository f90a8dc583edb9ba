"""Reads of MCP: stored servers with their live status, and every tool this service can call (aggregated)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import QuerySet

from agentsite.agent.tools import Tool, ToolContext, admin_only_tools, registry, resolve_caller
from agentsite.core.errors import AppError
from agentsite.core.kept import Kept
from mcpbridge.client import McpConnectError, ServerSpec, manager
from mcpbridge.kb import kb_search_tool
from mcpbridge.models import McpServer
from mcpbridge.oauthgrant import OAuthBearer
from mcpbridge.tools import McpTool, mcp_tool, own_tools_only, remote_tools, server_tools, upstream_error
from organisation.policy import USE, can, visible_q

# Tools the service serves over MCP and lists at /api/mcp/tools without offering them to the model.
# Built when listed: kb_search's modes follow whether the dense model is installed.
EXTRA_TOOLS: list[Callable[[], Tool]] = [kb_search_tool]


def spec_for(server: McpServer) -> ServerSpec:
    return ServerSpec(name=server.name, transport=server.transport, command=server.command,  # type: ignore[arg-type]
                      args=tuple(str(arg) for arg in server.args or ()),
                      env={str(key): str(value) for key, value in (server.env or {}).items()},
                      url=server.url, headers={str(key): str(value) for key, value in (server.headers or {}).items()},
                      auth=OAuthBearer(server.name) if server.auth == McpServer.OAUTH else None)


def principal(caller: ToolContext) -> Any:
    """The caller's user for the access policy, an admin only if the caller is one (an API key without the admin
    scope is not, whoever holds it); None for a caller with no user or a user who no longer exists."""
    if caller.user_id is None:
        return None
    user = get_user_model().objects.filter(pk=caller.user_id).first()
    if user is not None:
        user.is_staff = bool(caller.is_admin)  # this copy only: what the credential carries, not the account
    return user


def mcp_servers_visible_to(caller: ToolContext) -> QuerySet[McpServer]:
    """The stored servers whose access rule (organisation.policy) lets this caller in: every one for an admin,
    those open to everyone or granted to the user or one of their groups for a user, none for a caller with no
    user. An unresolved caller (`is_admin` None) is not taken for an admin. Nothing is cached: a grant or a
    membership that changes counts from the next listing, in every process.
    """
    user = principal(caller)
    if user is None:
        return McpServer.objects.none()
    return McpServer.objects.filter(visible_q(user, McpServer, every_object_for_admins=True))


def mcp_server_usable(caller: ToolContext, name: str) -> McpServer | None:
    """The stored server of this name if the caller may use it (organisation.policy.can), else None."""
    server = McpServer.objects.filter(name=name).first()
    if server is None:
        return None
    user = principal(caller)
    return server if user is not None and can(user, USE, server) else None


def mcp_server_specs_for(caller: ToolContext) -> tuple[frozenset[str], list[ServerSpec]]:
    """(the names of every stored server, the specs of those this caller may use: not those waiting for an
    OAuth authorization, whose tools are left out until an admin reconnects them)."""
    names = server_names.get()
    if not names:  # none stored (the usual case): no query while announcements arrive (server_names)
        return names, []
    usable = mcp_servers_visible_to(caller).exclude(status=McpServer.NEEDS_AUTHORIZATION)
    return names, [spec_for(server) for server in usable]


def _read_server_names(_key: object = None) -> frozenset[str]:
    """Every stored server's name, by a statement written once (the ORM's query compilation cost ~4 times the
    query)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT name FROM {connection.ops.quote_name(McpServer._meta.db_table)}")
        return frozenset(row[0] for row in cursor.fetchall())


SERVERS_TOPIC = "mcp.servers"  # announced when a server is saved or deleted (mcpbridge.apps)
SERVER_NAMES_TTL_S = 60.0  # bounds a change no signal saw (a bulk write; the services' update()s leave names alone)
# Every chat turn and /v1 agent run lists the MCP tools, and most deployments store no server: the names are kept
# per process while announcements reach it (agentsite.core.kept), so such a listing asks the database nothing.
server_names: Kept[frozenset[str]] = Kept(SERVERS_TOPIC, _read_server_names, ttl=SERVER_NAMES_TTL_S)


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


async def mcp_server_overview(*, caller: ToolContext) -> list[ServerOverview]:
    """Every stored server this caller may see, with this process's view of it; servers this process never
    tried are connected first (that is the reconnect after a start), but a failed or crashed one is left
    alone: it reconnects on its next use (a listing of tools or a call), and until then shows `error`.
    """
    caller = await resolve_caller(caller)

    def visible() -> list[McpServer]:
        return list(mcp_servers_visible_to(caller).select_related("oauth"))

    servers = await sync_to_async(visible)()
    untried = [server for server in servers if manager.state(server.name) is None
               and server.status != McpServer.NEEDS_AUTHORIZATION]
    if untried:
        await asyncio.gather(*(server_tools(spec_for(server)) for server in untried))
        servers = await sync_to_async(visible)()
    return [_overview(server) for server in servers]


def _overview(server: McpServer) -> ServerOverview:
    state = manager.state(server.name)
    if server.status == McpServer.NEEDS_AUTHORIZATION:
        return ServerOverview(server, server.status, server.error, 0)
    if state is not None and state.status in ("connected", "error"):
        return ServerOverview(server, state.status, state.error, len(state.tools))
    return ServerOverview(server, server.status, server.error, len(server.tools or []))


async def tools_available(*, caller: ToolContext, own_only: bool = False) -> list[Tool]:
    """Every tool the service can run for this caller: the registry's (built-ins, plugins, and unless
    own_only the external MCP servers' whose rule lets the caller in), then kb_search. First name wins, as
    in the registry, and tools reserved for admins are left out for everyone else, as there.
    """
    caller = await resolve_caller(caller)
    if own_only:
        with own_tools_only():
            tools = await registry.list_tools(caller, enabled_only=False)
    else:
        tools = await registry.list_tools(caller, enabled_only=False)
    names = {tool.name for tool in tools}
    reserved = frozenset() if caller.is_admin else admin_only_tools()
    extra = [make() for make in EXTRA_TOOLS]
    return tools + [tool for tool in extra if tool.name not in names and tool.name not in reserved]


def tool_server(tool: Tool) -> str:
    """The `server` a tool is listed under: the MCP server's name, or its registry source ("builtin", a plugin)."""
    return tool.server if isinstance(tool, McpTool) else tool.source


def tool_listed_name(tool: Tool) -> str:
    return tool.remote_name if isinstance(tool, McpTool) else tool.name


async def tool_find(*, caller: ToolContext, server: str, tool: str) -> Tool:
    """The tool `tool` of `server` (an MCP server or a registry source) that this caller may use. Raises
    AppError 404 `not_found` (for a server outside the caller's rule too, with the same answer as for one
    that does not exist), and 502 `upstream_error` when the MCP server cannot be reached (it is then marked
    `error`).
    """
    caller = await resolve_caller(caller)
    stored = await sync_to_async(mcp_server_usable)(caller, server)
    if stored is not None:
        found = await _remote_tool(spec_for(stored), tool)
    else:
        candidates = await tools_available(caller=caller, own_only=True)
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

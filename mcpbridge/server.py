"""This service as an MCP server: the tools it can run, served from the registry at each request.

The low-level `Server` is used rather than `MCPServer`'s decorated functions, so that whatever the registry
holds when a client asks (built-ins, plugins, workflows added later) is what is listed and called, with the
caller's identity: a fixed user for stdio (`runmcp --user`), the bearer token's user over HTTP. After the
registry's tools come `ask_<slug>`, one per named agent the caller may use (mcpbridge.ask); a registry tool of
the same name wins.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

import mcp_types as types
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.db import connections
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

import agentsite
from agentsite.agent.tools import ToolContext, call_tool, resolve_caller
from agentsite.agent.usage import Caller, calling
from mcpbridge import ask
from mcpbridge.content import result_to_mcp, tool_to_mcp
from mcpbridge.selectors import tools_available

logger = logging.getLogger(__name__)

SERVER_NAME = "agentsite"
INSTRUCTIONS = ("agentsite's tools: web search, web fetch, screenshots, a search of your knowledge base "
                "(kb_search), any tools its plugins and workflows add, and ask_<agent>: a question to each of its "
                "named agents you may use.")


def build_server(*, user_id: int | None = None) -> Server:
    """A server that acts as user_id (stdio), or, when that is None, as the user the HTTP transport
    authenticated (a request without one is refused).
    """

    async def list_tools(ctx: ServerRequestContext, params: types.PaginatedRequestParams | None
                         ) -> types.ListToolsResult:
        async with django_db_scope():
            caller = await resolve_caller(_context(ctx, user_id))
            tools = await tools_available(caller=caller, own_only=True)
            slugs = await ask.usable_slugs(caller, _usage(ctx, caller))
        listed = [tool_to_mcp(tool) for tool in tools]
        taken = {tool.name for tool in tools}
        listed += [types.Tool(name=name, description=ask.description(slug), input_schema=ask.INPUT_SCHEMA)
                   for slug in slugs if (name := ask.tool_name(slug)) not in taken]
        return types.ListToolsResult(tools=listed)

    async def call(ctx: ServerRequestContext, params: types.CallToolRequestParams) -> types.CallToolResult:
        async with django_db_scope():
            # Found among the tools listed for this caller only: one they may not use is an unknown tool.
            caller = await resolve_caller(_context(ctx, user_id))
            tools = await tools_available(caller=caller, own_only=True)
            tool = next((item for item in tools if item.name == params.name), None)
            # A tool that asks the model (a workflow's llm node, an agent) is metered for this caller, facet `mcp`.
            usage = _usage(ctx, caller)
            if tool is None and not params.name.startswith(ask.PREFIX):
                raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
            with calling(usage):
                if tool is None:  # an agent (mcpbridge.ask): a tool error when it is not one the caller may ask
                    result = await ask.ask(params.name, params.arguments or {}, caller, usage)
                else:
                    result = await call_tool(tool, params.arguments or {}, caller)
        return result_to_mcp(result)

    return Server(SERVER_NAME, version=agentsite.__version__, instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call)


def _usage(ctx: ServerRequestContext, caller: ToolContext) -> Caller:
    """The usage caller of a request (its API key's budget first, over HTTP), facet `mcp`."""
    key = ctx.request.scope.get("api_key") if ctx.request is not None else None
    return Caller.with_key(caller.user_id, key, "mcp")


def _context(ctx: ServerRequestContext, default: int | None) -> ToolContext:
    """The caller's ToolContext: an API key without the admin scope is never an admin's (mcpbridge.asgi)."""
    request = ctx.request
    user = request.scope.get("user") if request is not None else None
    claims = user.access_token.claims if isinstance(user, AuthenticatedUser) else None
    is_admin = claims.get("is_admin") if claims else None
    return ToolContext(user_id=_caller(ctx, default), is_admin=is_admin)


def _caller(ctx: ServerRequestContext, default: int | None) -> int | None:
    request = ctx.request
    if request is None:  # stdio: the process speaks for the user it was started for
        return default
    user = request.scope.get("user")
    claims = user.access_token.claims if isinstance(user, AuthenticatedUser) else None
    if not claims or claims.get("user_id") is None:
        # The HTTP door authenticates every request before it gets here; this is a second lock on it.
        raise MCPError(types.INVALID_REQUEST, "Not authenticated.")
    return claims["user_id"]


@contextlib.asynccontextmanager
async def django_db_scope() -> AsyncIterator[None]:
    """Sync ORM work inside runs on a thread of its own whose connections are closed at the end (these
    handlers run outside Django's request cycle). Closed, not left to their age: connections are persistent
    (CONN_MAX_AGE=None), and the thread goes away with the scope, so one left open would stay open, idle, until
    the garbage collector found it (on PostgreSQL, a connection slot each).
    """
    async with ThreadSensitiveContext():
        try:
            yield
        finally:
            await sync_to_async(connections.close_all)()

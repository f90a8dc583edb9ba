"""The tool source "mcp": the tools of every stored MCP server whose access rule lets the caller in
(organisation.policy, asked afresh on every listing), connecting lazily in this process."""

from __future__ import annotations

import asyncio

from agentsite.agent.tools import Tool, ToolContext, ToolSource
from agentsite.core.dbcall import db
from mcpbridge.client import manager
from mcpbridge.selectors import mcp_server_specs_for
from mcpbridge.tools import SOURCE_NAME, listing_own_tools_only, server_tools


class McpToolSource(ToolSource):
    name = SOURCE_NAME

    async def list_tools(self, ctx: ToolContext) -> list[Tool]:
        if listing_own_tools_only():
            return []
        # Only the servers whose access rule lets this caller in are listed (or connected for the listing).
        stored, specs = await db(mcp_server_specs_for, ctx)  # the pool's threads keep their connections
        if manager.names() - stored:  # removed (by another process) since this one connected them
            await manager.run(lambda: manager.retain(stored))
        listed = await asyncio.gather(*(server_tools(spec) for spec in specs))
        return [tool for tools in listed for tool in tools]

    def list_tools_now(self, ctx: ToolContext) -> list[Tool] | None:
        """No tools when this caller may use no stored server and this process holds no connection to let go of
        (the usual case: no MCP server configured); otherwise None, and the registry lists asynchronously."""
        if listing_own_tools_only():
            return []
        stored, specs = mcp_server_specs_for(ctx)
        try:
            stale = manager.names() - stored
        except RuntimeError:  # the manager's loop changed its connections meanwhile
            return None
        return None if specs or stale else []

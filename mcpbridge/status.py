"""The status this process found for each stored MCP server (connected, or error with the reason), written only
when it changes, so that a listing on every agent turn does not write the database each time."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from mcpbridge.models import McpServer

if TYPE_CHECKING:
    import mcp_types as types

# What this process last wrote for each server.
_recorded: dict[str, tuple[str, str, tuple[str, ...] | None]] = {}
_recorded_lock = threading.Lock()


def mcp_server_status_record(*, name: str, error: str, tools: list[types.Tool] | None = None) -> None:
    """Store what this process found: `error` (with the reason) when error is set, else `connected`."""
    status = McpServer.ERROR if error else McpServer.CONNECTED
    key = (status, error, tuple(tool.name for tool in tools) if tools is not None else None)
    with _recorded_lock:
        if _recorded.get(name) == key:
            return
        _recorded[name] = key
    changes: dict[str, Any] = {"status": status, "error": error}
    if tools is not None:
        changes["tools"] = tools_dumped(tools)
    # A server waiting for an OAuth authorization keeps that status: only its callback (or a disconnect) ends it.
    McpServer.objects.filter(name=name).exclude(status=McpServer.NEEDS_AUTHORIZATION).update(**changes)


def tools_dumped(tools: list[types.Tool]) -> list[dict[str, Any]]:
    """A server's tool list as stored on McpServer.tools."""
    return [tool.model_dump(by_alias=True, mode="json", exclude_none=True) for tool in tools]


def mcp_server_status_forget(name: str) -> None:
    """Forget what was written for a server (disconnected): a server connected again under its name is written."""
    with _recorded_lock:
        _recorded.pop(name, None)

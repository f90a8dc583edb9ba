"""Writes of MCP: connect (and store) a server, disconnect it, set its access rule (organisation.access), call
any listed tool."""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import urlsplit

from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction

from agentsite.agent.builtin.netguard import AddressPolicy
from agentsite.agent.builtin.web_fetch import private_fetch_allowed
from agentsite.agent.tools import (
    ToolContext,
    ToolError,
    ToolResult,
    call_tool,
    registry,
    resolve_caller,
    validation_problem,
)
from agentsite.core import invalidation
from agentsite.core.errors import AppError
from mcpbridge.client import CLOSE_TIMEOUT_S, CONNECT_TIMEOUT_S, SERVER_TOPIC, McpConnectError, ServerSpec, manager
from mcpbridge.models import McpServer, McpServerGrant
from mcpbridge.selectors import mcp_server_get, tool_find
from mcpbridge.status import mcp_server_status_forget, tools_dumped
from mcpbridge.tools import McpTool
from organisation.access import access_set
from organisation.models import PRIVATE, SHARED, VIEWER
from organisation.policy import RESOURCES

logger = logging.getLogger(__name__)

RESERVED_NAMES = frozenset({"builtin", "mcp", "plugin", "plugins"})

def transport_for_url(url: str) -> str:
    """The transport a URL most likely speaks: the legacy SSE endpoint conventionally ends in /sse."""
    return "sse" if urlsplit(url).path.rstrip("/").endswith("/sse") else "streamable-http"


def mcp_server_connect(*, name: str, command: str = "", args: list[str] | None = None,
                       env: dict[str, str] | None = None, url: str = "", transport: str | None = None,
                       headers: dict[str, str] | None = None, visibility: str = PRIVATE,
                       users: list[str] | None = None) -> McpServer:
    """Start (stdio) or reach (URL) a server, complete the handshake, list its tools, and store it with its
    access rule (`visibility`: private, everyone or shared; for shared, a `viewer` grant to each of `users`, by
    username). Groups are granted afterwards (PUT /api/mcp/servers/<name>/access).

    Raises AppError 409 `conflict` (name taken), 400 `invalid` (a URL to a private address while those are
    off, an unknown username), 502 `mcp_connect_failed` with the server's own reason (nothing is stored then).
    """
    _check_name_free(name)
    members = _users_named(users or [])
    if url:
        _check_url_allowed(url)
    spec = ServerSpec(name=name, transport=(transport or transport_for_url(url)) if url else "stdio",  # type: ignore[arg-type]
                      command=command, args=tuple(args or ()), env=dict(env or {}), url=url,
                      headers=dict(headers or {}))
    try:
        tools = manager.run_sync(lambda: manager.connect(spec), timeout=CONNECT_TIMEOUT_S + 2 * CLOSE_TIMEOUT_S)
    except McpConnectError as exc:
        logger.info("Connecting MCP server %r failed: %s", name, exc)
        raise AppError("mcp_connect_failed", f"Could not connect to the MCP server {name!r}: {exc}", 502,
                       {"reason": str(exc)}) from None
    try:
        with transaction.atomic():
            server = McpServer.objects.create(
                name=name, transport=spec.transport, command=command, args=list(spec.args), env=spec.env, url=url,
                headers=spec.headers, status=McpServer.CONNECTED, error="", tools=tools_dumped(tools),
                visibility=visibility, owner=None)
            if visibility == SHARED:
                McpServerGrant.objects.bulk_create(
                    [McpServerGrant(resource=server, user=user, role=VIEWER) for user in members])
    except IntegrityError:
        manager.run_sync(lambda: manager.disconnect(name), timeout=2 * CLOSE_TIMEOUT_S)
        raise _conflict(name) from None
    manager.run_sync(lambda: manager.confirm(name))
    logger.info("MCP server %r connected (%s, %d tools)", name, spec.transport, len(tools))
    return server


def mcp_server_access_set(*, name: str, visibility: str, users: list[str] | None = None,
                          request: Any = None) -> McpServer:
    """Replace the server's access rule whole, the older way (PATCH /api/mcp/servers/<name>): `visibility` and,
    for shared, a `viewer` grant to each of `users` (group grants go; PUT .../access keeps them). Audited and
    announced as organisation.access does. Raises AppError 404 `not_found`, 400 `invalid` (an unknown or
    inactive username)."""
    server = mcp_server_get(name=name)
    members = _users_named(users or []) if visibility == SHARED else []
    access_set(kind=RESOURCES["mcp_server"], resource=server, visibility=visibility,
               grants=[{"user": user.pk, "role": VIEWER} for user in members], request=request)
    logger.info("MCP server %r is now visible to %s", name, visibility)
    return server


def _users_named(usernames: list[str]) -> list[Any]:
    User = get_user_model()  # noqa: N806 - a class
    found = {user.get_username(): user for user in User.objects.filter(username__in=usernames)}
    unknown = [username for username in usernames if username not in found]
    if unknown:
        raise AppError("invalid", f"There is no user named {unknown[0]!r}.", 400,
                       {"users": [f"There is no user named {username!r}." for username in unknown]})
    return list(found.values())


def _check_name_free(name: str) -> None:
    if name.lower() in RESERVED_NAMES or name in registry.sources() or McpServer.objects.filter(name=name).exists():
        raise _conflict(name)


def _conflict(name: str) -> AppError:
    return AppError("conflict", f"The name {name!r} is taken; disconnect that server first or pick another name.",
                    409, {"name": [f"{name!r} is taken."]})


def _check_url_allowed(url: str) -> None:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    policy = AddressPolicy(allow_private=private_fetch_allowed())
    try:
        async_to_sync(policy.pin)(parts.hostname or "", port)
    except ToolError as exc:
        raise AppError("invalid", str(exc), 400, {"url": [str(exc)]}) from None


def mcp_server_disconnect(*, name: str) -> None:
    """Close this process's session with the server (a stdio server's process tree is stopped) and forget it.
    Raises AppError 404 `not_found`.
    """
    server = mcp_server_get(name=name)
    manager.run_sync(lambda: manager.disconnect(name), timeout=2 * CLOSE_TIMEOUT_S)
    server.delete()
    mcp_server_status_forget(name)
    # Every other process that holds a connection to it closes it (mcpbridge.client.let_go).
    transaction.on_commit(lambda: invalidation.announce(SERVER_TOPIC, name))
    logger.info("MCP server %r disconnected", name)


async def mcp_tool_call(*, caller: ToolContext, server: str, tool: str, arguments: dict[str, Any]) -> ToolResult:
    """Call any tool listed for this caller directly. Raises AppError 404 (unknown server or tool, or one
    outside the caller's access rule), 400 `invalid` (arguments that do not fit its input schema), 502
    `upstream_error` (an MCP server failed, timed out or went away).
    """
    caller = await resolve_caller(caller)
    found = await tool_find(caller=caller, server=server, tool=tool)
    problem = validation_problem(found, arguments)
    if problem:
        raise AppError("invalid", f"arguments: {problem}", 400, {"arguments": [problem]})
    if not isinstance(found, McpTool):
        return await call_tool(found, arguments, caller)
    try:
        async with asyncio.timeout(found.timeout):
            return await found.call(arguments, caller)
    except TimeoutError:
        raise AppError("upstream_error", f"The MCP server {server!r} did not answer within {found.timeout:g} s.",
                       502, {"server": server}) from None

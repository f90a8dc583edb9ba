"""Writes of MCP: connect (and store) a server, an OAuth one through its authorization (mcpbridge.oauthgrant),
disconnect it, set its access rule (organisation.access), call any listed tool."""

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
from mcpbridge.models import McpServer, McpServerGrant, McpServerOAuth
from mcpbridge.oauthgrant import (
    FlowTaken,
    oauth_flow_create,
    oauth_flow_take,
    oauth_tokens_store,
    registration_of,
    sealed_secret,
)
from mcpbridge.selectors import mcp_server_get, spec_for, tool_find
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


def mcp_server_oauth_connect(*, name: str, url: str, redirect_uri: str, transport: str | None = None,
                             scopes: list[str] | None = None, client_id: str = "", client_secret: str = "",
                             authorization_server: str = "", visibility: str = PRIVATE,
                             users: list[str] | None = None) -> tuple[McpServer, str]:
    """Store an OAuth-protected server as `needs_authorization` after discovering its authorization server and
    registering with it (unless `client_id` is given), and start its authorization: (the server, the URL where an
    admin consents). The callback (`mcp_server_oauth_complete`) connects it.

    Raises AppError 409 `conflict`, 400 `invalid` (as connect), 502 `mcp_connect_failed` when discovery or
    registration fails (nothing is stored then).
    """
    # Start-up cost: oauthclient imports the mcp package (half a second); only a process that uses OAuth pays it.
    from mcpbridge import oauthclient

    _check_name_free(name)
    members = _users_named(users or [])
    _check_url_allowed(url)
    if authorization_server:
        _check_url_allowed(authorization_server)
    try:
        found = async_to_sync(oauthclient.discover)(url, authorization_server=authorization_server,
                                                    scopes=" ".join(scopes or []))
        registration = (oauthclient.Registration(client_id, client_secret,
                                                 "client_secret_basic" if client_secret else "none")
                        if client_id else async_to_sync(oauthclient.register)(found, redirect_uri=redirect_uri))
    except oauthclient.OAuthProblem as exc:
        logger.info("Discovering the authorization of MCP server %r failed: %s", name, exc)
        raise AppError("mcp_connect_failed", f"Could not set up OAuth for the MCP server {name!r}: {exc}", 502,
                       {"reason": str(exc)}) from None
    try:
        with transaction.atomic():
            server = McpServer.objects.create(
                name=name, transport=transport or transport_for_url(url), url=url, auth=McpServer.OAUTH,
                status=McpServer.NEEDS_AUTHORIZATION, error="Waiting for an admin's consent.", tools=[],
                visibility=visibility, owner=None)
            if visibility == SHARED:
                McpServerGrant.objects.bulk_create(
                    [McpServerGrant(resource=server, user=user, role=VIEWER) for user in members])
            McpServerOAuth.objects.create(
                server=server, resource=found.resource, issuer=found.issuer,
                issuer_in_response=bool(found.metadata.authorization_response_iss_parameter_supported),
                authorization_endpoint=found.authorization_endpoint, token_endpoint=found.token_endpoint,
                client_id=registration.client_id, client_secret=sealed_secret(registration.client_secret),
                token_endpoint_auth_method=registration.token_endpoint_auth_method, redirect_uri=redirect_uri,
                requested_scopes=found.scopes)
            authorization_url = mcp_server_oauth_start(server=server)
    except IntegrityError:
        raise _conflict(name) from None
    logger.info("MCP server %r stored; waiting for its OAuth authorization", name)
    return server, authorization_url


def mcp_server_oauth_start(*, server: McpServer) -> str:
    """A new authorization of an OAuth server (connect, reconnect): the URL where an admin consents. The server
    keeps its grant until the callback replaces it."""
    # Start-up cost: oauthclient imports the mcp package (half a second); only a process that uses OAuth pays it.
    from mcpbridge import oauthclient

    grant = McpServerOAuth.objects.get(server=server)
    flow = oauth_flow_create(server=server)
    return async_to_sync(oauthclient.authorization_url)(
        registration=registration_of(grant), authorization_endpoint=grant.authorization_endpoint,
        redirect_uri=grant.redirect_uri, scopes=grant.requested_scopes, resource=grant.resource, state=flow.state,
        code_verifier=flow.code_verifier)


def mcp_server_reconnect(*, name: str) -> str:
    """Start a new authorization of an OAuth server (its grant refused or revoked): the consent URL. Raises
    AppError 404 `not_found`, 400 `invalid` (not an OAuth server)."""
    server = mcp_server_get(name=name)
    if server.auth != McpServer.OAUTH:
        raise AppError("invalid", f"The MCP server {name!r} does not use OAuth: disconnect and connect it again "
                                  "to change how it is reached.", 400, {"name": ["Not an OAuth server."]})
    return mcp_server_oauth_start(server=server)


def mcp_server_oauth_complete(*, state: str, code: str = "", error: str = "",
                              iss: str | None = None) -> tuple[str, str]:
    """Complete an authorization from the callback: (the server's name, "") once its tokens are stored, it is
    connected and its tools listed; else (the name or "", an error code: the remote's `error`, `invalid_state`
    for a state unknown, used or expired, `invalid_issuer` for a response from another authorization server than
    the one asked (RFC 9207 `iss`; its code is never exchanged), `mcp_connect_failed`, or the token endpoint's
    error)."""
    # Start-up cost: oauthclient imports the mcp package (half a second); only a process that uses OAuth pays it.
    from mcpbridge import oauthclient

    taken = oauth_flow_take(state=state) if state else None
    if taken is None:
        return "", "invalid_state"
    name = taken.server.name
    problem = oauthclient.issuer_problem(iss, issuer=taken.grant.issuer, required=taken.grant.issuer_in_response)
    if problem:
        logger.warning("The authorization response for MCP server %r was refused: %s", name, problem)
        return name, "invalid_issuer"
    if error or not code:
        logger.info("The authorization of MCP server %r was not given: %s", name, error or "no code")
        return name, error or "invalid_request"
    try:
        tokens = async_to_sync(oauthclient.exchange)(
            registration=registration_of(taken.grant), token_endpoint=taken.grant.token_endpoint,
            redirect_uri=taken.grant.redirect_uri, code=code, code_verifier=taken.code_verifier,
            resource=taken.grant.resource)
    except oauthclient.OAuthProblem as exc:
        logger.info("The code exchange of MCP server %r failed: %s", name, exc)
        McpServer.objects.filter(pk=taken.server.pk).update(error=str(exc))
        return name, exc.code
    oauth_tokens_store(grant=taken.grant, tokens=tokens)
    return name, _oauth_connected(taken)


def _oauth_connected(taken: FlowTaken) -> str:
    server = McpServer.objects.get(pk=taken.server.pk)
    spec = spec_for(server)
    try:
        tools = manager.run_sync(lambda: manager.connect(spec), timeout=CONNECT_TIMEOUT_S + 2 * CLOSE_TIMEOUT_S)
    except McpConnectError as exc:
        logger.info("Connecting the authorized MCP server %r failed: %s", server.name, exc)
        McpServer.objects.filter(pk=server.pk).update(status=McpServer.ERROR, error=str(exc))
        return "mcp_connect_failed"
    McpServer.objects.filter(pk=server.pk).update(status=McpServer.CONNECTED, error="", tools=tools_dumped(tools))
    manager.run_sync(lambda: manager.confirm(server.name))
    mcp_server_status_forget(server.name)
    logger.info("MCP server %r authorized and connected (%d tools)", server.name, len(tools))
    return ""


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

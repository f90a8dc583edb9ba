"""The MCP server over HTTP, mounted at /mcp next to Django: Streamable HTTP at /mcp, legacy SSE at /mcp/sse.

Every request needs a bearer access token or API key (with the `mcp` scope) and acts as its user; a stream ends
at its next event once that credential dies (agentsite.core.sse.SseGuard). Any process answers any request:
Streamable HTTP is stateless with its sessions in the database (mcpbridge.httpsessions), and the messages posted
for a legacy SSE stream reach its process through a relay (mcpbridge.relay). Daphne runs no ASGI lifespan, so
the session manager is entered lazily on the first request and cancelled at shutdown (docs/notes.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.db import DatabaseError, close_old_connections
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types.jsonrpc import CONNECTION_CLOSED, INVALID_REQUEST
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION
from starlette.authentication import AuthCredentials

from accounts import caller
from accounts.authentication import credential_problem
from agentsite.core.asgihttp import admitted, error, header, request_origin
from agentsite.core.errors import AppError
from agentsite.core.sse import SseGuard, sse_event
from mcpbridge.httpsessions import http_session_close, http_session_find, http_session_open
from mcpbridge.paths import MCP_PATH, MESSAGES_PATH, SSE_PATH
from mcpbridge.relay import relay_for_settings
from mcpbridge.server import build_server, django_db_scope
from mcpbridge.sse import SseSessions
from oauth import bearer
from oauth import tokens as oauth_tokens
from oauth.resource import METADATA_PATH, bearer_challenge, resource_url
from oauth.tokens import TokenCredential

logger = logging.getLogger(__name__)

MCP_SESSION_ID = b"mcp-session-id"
MCP_PROTOCOL_VERSION = b"mcp-protocol-version"
_CORS_EXPOSE = b"mcp-session-id, mcp-protocol-version, www-authenticate"
# MCP's transports send more headers than the API allows (mcp-session-id, mcp-param-<name>, ...): an allowed
# origin may send the ones it asks for.
_CORS_DEFAULT_HEADERS = "authorization, content-type, mcp-session-id, mcp-protocol-version, last-event-id"

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


class McpHttpApp:
    """The ASGI app for every path under /mcp (one per process: the session manager can run only once)."""

    def __init__(self) -> None:
        self.server = build_server()
        # Host and Origin are checked here against ALLOWED_HOSTS with Django's own rules (wildcards
        # included), which the SDK's exact-match list cannot express; its own check is therefore off.
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        # Stateless: each request is served on its own, in whichever process it reaches; the sessions are ours.
        self.session_manager = StreamableHTTPSessionManager(app=self.server, stateless=True,
                                                            security_settings=security)
        self.sse = SseSessions(MESSAGES_PATH, relay_for_settings())
        self._manager_task: asyncio.Task | None = None
        self._manager_ready: asyncio.Future[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        admitted_send = await admitted(scope, send, expose=_CORS_EXPOSE, methods=b"GET, POST, DELETE, OPTIONS",
                                       default_headers=_CORS_DEFAULT_HEADERS)
        if admitted_send is None:
            return
        send = admitted_send
        identity, refused = await _authenticate(scope)
        if refused is not None:
            headers = [(b"www-authenticate", _challenge(scope, refused).encode("latin-1"))]
            return await error(send, refused.status, refused.code, refused.message, headers=headers)
        assert identity is not None
        key = identity.key
        app = identity.credential.client_pk if isinstance(identity.credential, OAuthCredential) else None
        # scope["api_key"]: the API key this request came with, or None (accounts.caller).
        scope = {**scope, "user": _mcp_user(scope, identity.user_id, key, app), "auth": AuthCredentials([]),
                 "api_key": key}
        # An event stream ends at its next event once the token or key dies.
        guard = _revocable(identity.credential, send, receive)
        await self._route(scope, guard.receive, guard.send)

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        if path in (MCP_PATH, MCP_PATH + "/"):
            if not await self._session_manager_started():
                return await error(send, 503, "unavailable", "The MCP session manager could not start.")
            return await self._serve_streamable(scope, receive, send)
        if path == SSE_PATH:
            if scope["method"] != "GET":
                return await error(send, 405, "method_not_allowed", "Open the SSE stream with GET.")
            return await self.sse.serve(self.server, _owner(scope), scope, receive, send)
        if path.rstrip("/") == MESSAGES_PATH.rstrip("/"):
            return await self.sse.post(_owner(scope), scope, receive, send)
        return await error(send, 404, "not_found", f"No MCP endpoint at {path}; use {MCP_PATH} or {SSE_PATH}.")

    # Streamable HTTP: the SDK's stateless transport, the sessions in the database.

    async def _serve_streamable(self, scope: Scope, receive: Receive, send: Send) -> None:
        method, owner = scope["method"], _owner(scope)
        session_id = header(scope, MCP_SESSION_ID)
        if session_id is None:
            if method == "GET":  # nothing is ever sent unprompted: no stream to open (the spec allows 405)
                return await _jsonrpc_error(send, 405, "Method Not Allowed: this server opens no GET stream.",
                                            [(b"allow", b"POST, DELETE")])
            if method == "DELETE":
                return await _jsonrpc_error(send, 400, "Bad Request: Missing session ID")
            if method == "POST":
                body, receive = await _buffered(receive)
                version = _initialize_version(body)
                if version is not None:
                    return await self._open_session(owner, version, scope, receive, send)
            return await self.session_manager.handle_request(scope, receive, send)
        try:
            version = await _in_database(http_session_find, session_id=session_id, owner=owner)
            if version is not None and method == "DELETE":
                await _in_database(http_session_close, session_id=session_id, owner=owner)
        except DatabaseError:
            logger.exception("The MCP sessions could not be read")
            return await _jsonrpc_error(send, 503, "The session store is unavailable; try again.")
        if version is None:  # unknown, ended, expired, or another principal's: the SDK's answer
            return await _jsonrpc_error(send, 404, "Session not found")
        if method == "DELETE":
            return await _jsonrpc_error(send, 200, None, [(MCP_SESSION_ID, session_id.encode("latin-1"))])
        if method == "GET":
            return await _jsonrpc_error(send, 405, "Method Not Allowed: this server opens no GET stream.",
                                        [(b"allow", b"POST, DELETE")])
        if header(scope, MCP_PROTOCOL_VERSION) is None:  # the version the session negotiated, as the SDK would
            scope = {**scope, "headers": [*scope["headers"], (MCP_PROTOCOL_VERSION, version.encode("latin-1"))]}
        return await self.session_manager.handle_request(scope, receive, _with_header(
            send, MCP_SESSION_ID, session_id.encode("latin-1")))

    async def _open_session(self, owner: str, version: str, scope: Scope, receive: Receive, send: Send) -> None:
        """An `initialize`: a session is opened for it, named in a successful answer and forgotten otherwise."""
        try:
            session_id = await _in_database(http_session_open, owner=owner, protocol_version=version)
        except DatabaseError:
            logger.exception("An MCP session could not be stored")
            return await _jsonrpc_error(send, 503, "The session store is unavailable; try again.")
        status: list[int] = []

        async def send_opening(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
                if message["status"] == 200:
                    message = {**message, "headers": [*message.get("headers", []),
                                                      (MCP_SESSION_ID, session_id.encode("latin-1"))]}
            await send(message)

        try:
            await self.session_manager.handle_request(scope, receive, send_opening)
        finally:
            if status[:1] != [200]:
                with contextlib.suppress(DatabaseError):
                    await _in_database(http_session_close, session_id=session_id, owner=owner)

    # The session manager's lifetime.

    async def _session_manager_started(self) -> bool:
        if self._manager_ready is None:
            self._manager_ready = asyncio.get_running_loop().create_future()
            self._manager_task = asyncio.create_task(self._run_session_manager(self._manager_ready),
                                                     name="mcp-session-manager")
            on_server_shutdown(self.shutdown)
        try:
            await asyncio.shield(self._manager_ready)
        except Exception:
            return False
        return True

    async def _run_session_manager(self, ready: asyncio.Future[None]) -> None:
        try:
            async with self.session_manager.run():
                ready.set_result(None)
                await asyncio.Event().wait()  # until shutdown() cancels this task
        except Exception as exc:  # a boundary: every request then answers 503, and the log says why
            logger.exception("The MCP session manager stopped")
            if not ready.done():
                ready.set_exception(exc)

    async def shutdown(self) -> None:
        """Cancel the session manager's task (and with it every Streamable HTTP session)."""
        task = self._manager_task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def on_server_shutdown(callback: Callable[[], Any]) -> None:
    """Run callback (a coroutine function) when the ASGI server shuts down. Daphne has no lifespan, but its
    Twisted reactor fires a "before shutdown" trigger, and waits for the Deferred a trigger returns.
    """
    if "twisted.internet.reactor" not in sys.modules:
        return  # not under daphne: the event loop's end cancels the task
    # Importing twisted.internet.reactor installs a reactor: only under daphne, which installed its own first.
    from twisted.internet import defer, reactor

    def trigger() -> defer.Deferred:
        return defer.Deferred.fromFuture(asyncio.ensure_future(callback()))

    reactor.addSystemEventTrigger("before", "shutdown", trigger)


# --- checks -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class OAuthCredential:
    """An OAuth access token's credential at /mcp (oauth.tokens) and the client it was issued to."""

    token: TokenCredential
    client_pk: int


async def _authenticate(scope: Scope) -> tuple[Any, AppError | None]:
    """(the caller, None) of the request's Bearer credential: an OAuth access token issued for this endpoint
    (oauth.tokens), or accounts.caller's (a key needing the `mcp` scope); or (None, the AppError that refuses
    it: 401 without a standing credential, 403 `key_scope` or `insufficient_scope`)."""
    async with django_db_scope():
        found, refused = await bearer.authenticate(
            header(scope, b"authorization"), resource=resource_url(request_origin(scope)), scope="mcp",
            missing="Send Authorization: Bearer <access token or API key> (from /api/auth/login or /api/keys), or "
                    "connect with OAuth (see the WWW-Authenticate header's resource_metadata).")
    if isinstance(found, oauth_tokens.Grant):
        return caller.Identity(found.user, None, OAuthCredential(found.credential, found.client_pk)), None
    return found, refused


def _challenge(scope: Scope, refused: AppError) -> str:
    """The WWW-Authenticate header of a refusal (RFC 6750 §3, RFC 9728 §5.1): where the resource's metadata is,
    the scope needed, and for a presented credential the error."""
    return bearer_challenge(f"{request_origin(scope)}{METADATA_PATH}{MCP_PATH}", "mcp", status=refused.status,
                            presented=refused.code != "not_authenticated")


async def _oauth_problem(credential: OAuthCredential) -> AppError | None:
    detail = await oauth_tokens.problem(credential.token)
    return None if detail is None else AppError("token_invalid", detail, 401)


def _revocable(credential: Any, send: Send, receive: Receive) -> SseGuard:
    if isinstance(credential, OAuthCredential):
        return SseGuard(send, receive, lambda: _oauth_problem(credential), _revoked_event)
    return SseGuard(send, receive, lambda: credential_problem(credential), _revoked_event)


def _revoked_event(exc: AppError, replaced: bytes) -> bytes:
    """The JSON-RPC error that ends an MCP event stream whose credential died. When the event it replaces
    answers a request, the error answers that request (the client's call raises it); otherwise its id is
    null (JSON-RPC's "no request")."""
    message = _jsonrpc_of(replaced)
    answers = isinstance(message, dict) and "id" in message and "method" not in message
    error = {"code": CONNECTION_CLOSED, "message": exc.message, "data": {"code": exc.code}}
    return sse_event({"jsonrpc": "2.0", "id": message["id"] if answers else None, "error": error}, "message")


def _jsonrpc_of(event: bytes) -> Any:
    data = [line[5:].removeprefix(" ") for line in event.decode("utf-8", "replace").splitlines()
            if line.startswith("data:")]
    try:
        return json.loads("\n".join(data)) if data else None
    except ValueError:
        return None


def _owner(scope: Scope) -> str:
    """The principal a request acts as (`user:<id>`, or `user:<id>:key:<id>`): who a session answers."""
    return scope["user"].access_token.client_id


def _initialize_version(body: bytes) -> str | None:
    """The protocol version an `initialize` request in `body` negotiates (as the SDK does); None for any other
    message."""
    try:
        message = json.loads(body)
    except ValueError:
        return None
    if not isinstance(message, dict) or message.get("method") != "initialize" or "id" not in message:
        return None
    params = message.get("params")
    requested = params.get("protocolVersion") if isinstance(params, dict) else None
    return requested if requested in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION


async def _buffered(receive: Receive) -> tuple[bytes, Receive]:
    """The request's whole body (the ASGI wrapper bounds its size), and a receive that gives it again."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = b"".join(chunks)
    replayed = False

    async def again() -> dict[str, Any]:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, again


async def _in_database(function: Callable[..., Any], **kwargs: Any) -> Any:
    """function(**kwargs) on one of the shared pool's threads, whose connections persist between requests (a
    session lookup on every request would otherwise open a connection of its own)."""

    def run() -> Any:
        close_old_connections()  # a connection that broke or errored is replaced before use
        return function(**kwargs)

    return await sync_to_async(run, thread_sensitive=False)()


def _with_header(send: Send, name: bytes, value: bytes) -> Send:
    async def send_with_header(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), (name, value)]}
        await send(message)

    return send_with_header


def _mcp_user(scope: Scope, user_id: int, key: Any = None, app: int | None = None) -> AuthenticatedUser:
    # The SDK binds each session to the principal that opened it (client_id, issuer, subject): naming the
    # user, not the token, lets a client go on with a session after refreshing its token. An API key is a
    # principal of its own (its scopes decide whether it acts as an admin), so a session opened with one
    # serves that key only; an app connected through OAuth (`app`: its client) is one too, whatever token of
    # its grant it sends, and never acts as an admin. `is_admin` False: no admin rights (None: look the user up).
    is_admin = None if (key is None or "admin" in key.scopes) and app is None else False
    client_id = f"user:{user_id}" if key is None else f"user:{user_id}:key:{key.pk}"
    if app is not None:
        client_id = f"user:{user_id}:app:{app}"
    return AuthenticatedUser(AccessToken(token="", client_id=client_id, scopes=[], subject=str(user_id),
                                         claims={"user_id": user_id, "is_admin": is_admin}))


# --- responses --------------------------------------------------------------------------------------

async def _jsonrpc_error(send: Send, status: int, message: str | None,
                         headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """An answer as the SDK's Streamable HTTP transport gives it: a JSON-RPC error without an id (none when
    message is None)."""
    body = b"" if message is None else json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": message}}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


_app: McpHttpApp | None = None


def mcp_asgi_app() -> McpHttpApp:
    """The process's one MCP HTTP app (the factory `agentsite.core.mounts.MOUNTS` calls)."""
    global _app
    if _app is None:
        _app = McpHttpApp()
    return _app

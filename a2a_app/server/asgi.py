"""The A2A door, mounted next to Django at /a2a: each agent's JSON-RPC endpoint (/a2a/<slug>) and card
(/a2a/<slug>/.well-known/agent-card.json).

This app decides who may call before the SDK sees a request: the Host and Origin (as /mcp does), then the
credential: an API key with the scope `a2a`, a dashboard token, or an OAuth access token issued for the resource
<origin>/a2a with the scope `a2a`. No credential → 401 with a `WWW-Authenticate` challenge naming the resource's
metadata; a presented credential that does not stand → 401 `token_invalid`, never served as anonymous; a key
without `a2a` → 403 `key_scope`; an agent the caller may not use, or none of that slug → 404; a model their
groups do not allow → 403 `model_not_allowed`; a spent budget → 429. Then the SDK's JSON-RPC route (A2A 1.0, with
the 0.3 method names on the same endpoint) runs the request with one request handler per process, its tasks in
the database (a2a_app.server.store), so any process answers for any task. A streamed answer ends at its next
event once the credential dies.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_jsonrpc_routes
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from starlette.applications import Starlette
from starlette.authentication import SimpleUser
from starlette.requests import Request

from a2a_app.paths import A2A_PATH, CARD_NAME
from a2a_app.server import cards, executor, selectors
from a2a_app.server.store import CallState, OrmEventStream, OrmTaskStore
from accounts.authentication import credential_problem
from agentsite.agent import agents, modelaccess, usage
from agentsite.agent.usage import Caller
from agentsite.core.asgihttp import admitted, error, header, json_response, request_origin
from agentsite.core.dbcall import db
from agentsite.core.errors import AppError
from agentsite.core.processes import current_process_id, recorded_process_id
from agentsite.core.sse import SseGuard, sse_event
from oauth import bearer
from oauth import tokens as oauth_tokens
from oauth.resource import a2a_metadata_url, a2a_resource_url, bearer_challenge

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

logger = logging.getLogger(__name__)

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]
STATE_KEY = "agentsite.a2a"
_PATH = re.compile(r"^/a2a/(?P<slug>[^/]+)(?P<card>/\.well-known/agent-card\.json)?/?$")
_CORS_EXPOSE = b"www-authenticate"
_CORS_DEFAULT_HEADERS = "authorization, content-type, a2a-version, a2a-extensions, last-event-id"


class _ContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's call context with what the door resolved (CallState) in its state."""

    def build(self, request: Request) -> Any:
        context = super().build(request)
        context.state[CallState.KEY] = request.scope[STATE_KEY]
        return context


class A2AApp:
    """The ASGI app for every path under /a2a (one per process: the SDK's handler keeps the running tasks)."""

    def __init__(self) -> None:
        # The handler's own card only answers the SDK's checks (streaming is on); each agent's card is cards.py's.
        handler_card = AgentCard(name="agentsite", description="agentsite's agents", version="1",
                                 supported_interfaces=[AgentInterface(url=A2A_PATH, protocol_binding="JSONRPC",
                                                                      protocol_version=cards.PROTOCOL_VERSION)],
                                 capabilities=AgentCapabilities(streaming=True),
                                 default_input_modes=cards.MODES, default_output_modes=cards.MODES,
                                 skills=[AgentSkill(id="agent", name="agent", description="An agent's turn.")])
        self.handler = DefaultRequestHandler(agent_executor=executor.AgentsiteExecutor(), task_store=OrmTaskStore(),
                                             agent_card=handler_card, event_stream=OrmEventStream())
        self.routes = Starlette(routes=create_jsonrpc_routes(
            self.handler, rpc_url=A2A_PATH + "/{slug}", context_builder=_ContextBuilder(), enable_v0_3_compat=True))
        executor.connect()  # a cancel written by any process stops the run where it runs

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        admitted_send = await admitted(scope, send, expose=_CORS_EXPOSE, methods=b"GET, POST, OPTIONS",
                                       default_headers=_CORS_DEFAULT_HEADERS)
        if admitted_send is None:
            return
        send = admitted_send
        matched = _PATH.match(scope["path"])
        slug = matched["slug"] if matched else ""
        public_card = bool(matched and matched["card"] and slug in cards.public_slugs())
        identity = None
        # Every other path needs a credential first, even one that serves nothing; a credential presented with a
        # public card's request must stand too (refused, never read as anonymous).
        if not public_card or header(scope, b"authorization") is not None:
            identity, refused = await _authenticate(scope)
            if refused is not None:
                return await _refuse(scope, send, refused)
        if matched is None or not agents.SLUG_PATTERN.match(slug):
            return await error(send, 404, "not_found", f"No A2A endpoint at {scope['path']}; an agent's is "
                                f"{A2A_PATH}/<slug>, its card {A2A_PATH}/<slug>/{CARD_NAME}.")
        if matched["card"]:
            return await self._card(scope, send, slug, None if public_card else identity)
        if scope["method"] != "POST":
            return await error(send, 405, "method_not_allowed", "Send A2A JSON-RPC requests with POST.",
                                [(b"allow", b"POST")])
        try:
            state = await _call_state(identity, slug)
            await usage.check(state.caller)
        except AppError as exc:
            return await error(send, exc.status, exc.code, exc.message, _retry_after(exc))
        scope = {**scope, "user": SimpleUser(state.owner), STATE_KEY: state}
        guard = SseGuard(send, receive, lambda: _credential_problem(identity), _ended_event)
        await self.routes(scope, guard.receive, guard.send)

    async def _card(self, scope: Scope, send: Send, slug: str, identity: _Identity | None) -> None:
        """The agent's card to a caller who may use it (identity None: a public card, to anyone)."""
        if scope["method"] not in ("GET", "HEAD"):
            return await error(send, 405, "method_not_allowed", "Read an agent card with GET.", [(b"allow", b"GET")])
        facts = await selectors.agent_facts(None if identity is None else identity.user, slug)
        if facts is None:
            return await error(send, 404, "not_found", f"No agent {slug!r} that you may use.")
        await json_response(send, 200, cards.agent_card(request_origin(scope), facts))


class _Identity:
    """A caller at this door: the accounts Identity, or an OAuth grant's user (`oauth` its credential)."""

    def __init__(self, user: AbstractBaseUser, key: Any, credential: Any, oauth: bool):
        self.user, self.key, self.credential, self.oauth = user, key, credential, oauth

    @property
    def user_id(self) -> int:
        return int(self.user.pk)

    def caller(self) -> Caller:
        if self.oauth:  # an app connected through OAuth never acts as an admin
            return Caller(self.user_id, facet="a2a", admin=False)
        return Caller.with_key(self.user_id, self.key, "a2a")

    @property
    def is_admin(self) -> bool | None:
        return False if self.oauth or (self.key is not None and "admin" not in self.key.scopes) else None


async def _authenticate(scope: Scope) -> tuple[_Identity | None, AppError | None]:
    found, refused = await bearer.authenticate(
        header(scope, b"authorization"), resource=a2a_resource_url(request_origin(scope)), scope="a2a",
        missing="Send Authorization: Bearer <API key with the scope a2a, or an access token> (from /api/keys, or "
                "OAuth: see the WWW-Authenticate header's resource_metadata).")
    if isinstance(found, oauth_tokens.Grant):
        return _Identity(found.user, None, found.credential, oauth=True), None
    if found is None:
        return None, refused
    return _Identity(found.user, found.key, found.credential, oauth=False), None


async def _call_state(identity: _Identity, slug: str) -> CallState:
    """What a call to agent `slug` runs with; AppError 404 (no such agent for this caller) or 403
    `model_not_allowed` (their groups' model lists)."""
    model = agents.PREFIX + slug
    settings_ = await selectors.run_settings(identity.user, slug)
    caller_ = identity.caller()
    await modelaccess.require(caller_, agents.access_names(model))
    return CallState(identity=identity, slug=slug, settings=settings_, caller=caller_, is_admin=identity.is_admin,
                     process=recorded_process_id() or await db(current_process_id))


async def _credential_problem(identity: _Identity) -> AppError | None:
    if identity.oauth:
        detail = await oauth_tokens.problem(identity.credential, scope="a2a")
        return None if detail is None else AppError("token_invalid", detail, 401)
    return await credential_problem(identity.credential)


def _ended_event(exc: AppError, replaced: bytes) -> bytes:
    """The event that ends a stream whose credential died: a JSON-RPC error (id null)."""
    del replaced
    return sse_event({"jsonrpc": "2.0", "id": None,
                      "error": {"code": -32001, "message": exc.message, "data": {"code": exc.code}}})


def _retry_after(exc: AppError) -> list[tuple[bytes, bytes]]:
    seconds = (exc.details or {}).get("retry_after") if isinstance(exc.details, dict) else None
    return [(b"retry-after", str(int(seconds)).encode())] if isinstance(seconds, int | float) else []


async def _refuse(scope: Scope, send: Send, refused: AppError) -> None:
    challenge = bearer_challenge(a2a_metadata_url(request_origin(scope)), "a2a", status=refused.status,
                                 presented=refused.code != "not_authenticated").encode("latin-1")
    await error(send, refused.status, refused.code, refused.message, [(b"www-authenticate", challenge)])


_app: A2AApp | None = None


def a2a_asgi_app() -> A2AApp:
    """The process's one A2A app (the factory agentsite.core.mounts.MOUNTS calls)."""
    global _app
    if _app is None:
        _app = A2AApp()
    return _app

"""An OAuth server's grant in the database: the pending authorizations, the tokens (sealed with
agentsite.core.secretbox), their refresh, and the bearer auth its connections send.

Invariants: a refresh is claimed by a conditional update naming the grant's `generation` (one refresh at a
time across every process and host: remote servers rotate refresh tokens and treat a reused one as theft), and
a token is read from the database on each use, so whichever process refreshed, every process sends the new
one. A grant the server refuses puts the server in `needs_authorization`, announced to every process.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import httpx2
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agentsite.core import invalidation
from agentsite.core.dbcall import db
from agentsite.core.errors import AppError
from agentsite.core.secretbox import SecretBoxError, seal, unseal
from mcpbridge.client import SERVER_TOPIC
from mcpbridge.models import McpOAuthFlow, McpServer, McpServerOAuth

if TYPE_CHECKING:
    from mcpbridge.oauthclient import Registration, Tokens

logger = logging.getLogger(__name__)

FLOW_TTL = timedelta(minutes=10)
REFRESH_MARGIN = timedelta(seconds=60)  # an access token this close to its end is refreshed before use
REFRESH_CLAIM = timedelta(seconds=30)  # a claim left by a process that died is taken over after this
REFRESH_POLL_S = 0.2
TOKEN_PURPOSE = "mcpbridge.oauth.token"
SECRET_PURPOSE = "mcpbridge.oauth.client_secret"
VERIFIER_PURPOSE = "mcpbridge.oauth.code_verifier"


UNSEALABLE = "Its OAuth secrets were sealed under another SECRET_KEY: reconnect it."


class NeedsAuthorization(Exception):
    """The server has no usable grant: an admin must reconnect it (a new consent)."""


class RefreshUnavailable(Exception):
    """A refresh could not be made now (the authorization server unreachable, another process's refresh not
    finished in time); the grant stands and a later use tries again."""


def state_digest(state: str) -> str:
    """What is stored of a flow's state: its SHA-256 (a leaked table holds no usable state)."""
    return hashlib.sha256(state.encode()).hexdigest()


def registration_of(grant: McpServerOAuth) -> Registration:
    """The client registration the grant was made with; raises AppError 400 when its sealed secret no longer
    opens (SECRET_KEY changed): the server must be connected again with its client_secret."""
    # Start-up cost: oauthclient imports the mcp package (half a second); only a process that uses OAuth pays it.
    from mcpbridge.oauthclient import Registration

    try:
        secret = unseal(grant.client_secret, purpose=SECRET_PURPOSE) if grant.client_secret else ""
    except SecretBoxError:
        raise AppError("invalid", f"The client secret of {grant.server.name!r} was sealed under another "
                       "SECRET_KEY: disconnect it and connect it again (with its client_secret).", 400,
                       {"name": [UNSEALABLE]}) from None
    return Registration(client_id=grant.client_id, client_secret=secret,
                        token_endpoint_auth_method=grant.token_endpoint_auth_method)


def sealed_secret(secret: str) -> str:
    """A client secret as McpServerOAuth stores it."""
    return seal(secret, purpose=SECRET_PURPOSE) if secret else ""


# --- the pending authorization ------------------------------------------------------------------------

@dataclass(frozen=True)
class FlowStart:
    state: str
    code_verifier: str


def oauth_flow_create(*, server: McpServer) -> FlowStart:
    """A new pending authorization for the server (its state and PKCE verifier); expired ones are swept."""
    McpOAuthFlow.objects.filter(expires_at__lt=timezone.now()).delete()
    state, verifier = secrets.token_urlsafe(32), secrets.token_urlsafe(48)
    McpOAuthFlow.objects.create(state_digest=state_digest(state), server=server, expires_at=timezone.now() + FLOW_TTL,
                                code_verifier=seal(verifier, purpose=VERIFIER_PURPOSE))
    return FlowStart(state=state, code_verifier=verifier)


@dataclass(frozen=True)
class FlowTaken:
    server: McpServer
    grant: McpServerOAuth
    code_verifier: str


def oauth_flow_take(*, state: str) -> FlowTaken | None:
    """The pending authorization of this state, used up (a second callback with it finds nothing); None when
    unknown, used or older than ten minutes."""
    flow = McpOAuthFlow.objects.select_related("server").filter(state_digest=state_digest(state)).first()
    if flow is None or McpOAuthFlow.objects.filter(pk=flow.pk).delete()[0] != 1:
        return None
    grant = McpServerOAuth.objects.filter(server=flow.server).first()
    if flow.expires_at <= timezone.now() or grant is None:
        return None
    return FlowTaken(server=flow.server, grant=grant,
                     code_verifier=unseal(flow.code_verifier, purpose=VERIFIER_PURPOSE))


# --- the tokens ----------------------------------------------------------------------------------------

def _token_changes(tokens: Tokens, *, generation: int) -> dict:
    expires_at = timezone.now() + timedelta(seconds=tokens.expires_in) if tokens.expires_in is not None else None
    changes = {"access_token": seal(tokens.access_token, purpose=TOKEN_PURPOSE),
               "refresh_token": seal(tokens.refresh_token, purpose=TOKEN_PURPOSE) if tokens.refresh_token else "",
               "expires_at": expires_at, "generation": generation + 1, "refreshing_until": None,
               "status": McpServerOAuth.AUTHORIZED, "updated_at": timezone.now()}
    if tokens.scope:
        changes["scopes"] = tokens.scope
    return changes


def oauth_tokens_store(*, grant: McpServerOAuth, tokens: Tokens) -> None:
    """Keep a new grant's tokens (sealed) from a completed authorization."""
    McpServerOAuth.objects.filter(pk=grant.pk).update(**_token_changes(tokens, generation=grant.generation))


@transaction.atomic
def oauth_needs_authorization(*, name: str, reason: str) -> None:
    """The server's grant is gone (refused, revoked): its tools leave every listing until an admin reconnects
    it, and every process closes its connection."""
    server = McpServer.objects.filter(name=name).first()
    if server is None:
        return
    McpServerOAuth.objects.filter(server=server).update(status=McpServerOAuth.NEEDS_AUTHORIZATION,
                                                        refreshing_until=None, access_token="", refresh_token="")
    McpServer.objects.filter(pk=server.pk).update(status=McpServer.NEEDS_AUTHORIZATION, error=reason)
    logger.warning("MCP server %r needs authorization again: %s", name, reason)
    transaction.on_commit(lambda: invalidation.announce(SERVER_TOPIC, name))


@dataclass(frozen=True)
class GrantState:
    status: str
    access_token: str
    expires_at: datetime | None
    generation: int
    refreshing_until: datetime | None
    has_refresh_token: bool


def _grant_state(name: str) -> GrantState | None:
    grant = McpServerOAuth.objects.filter(server__name=name).first()
    if grant is None:
        return None
    try:
        access = unseal(grant.access_token, purpose=TOKEN_PURPOSE) if grant.access_token else ""
    except SecretBoxError:  # SECRET_KEY changed without SECRET_KEY_FALLBACKS: the grant is lost, not an error
        oauth_needs_authorization(name=name, reason=UNSEALABLE)
        return GrantState(McpServerOAuth.NEEDS_AUTHORIZATION, "", None, grant.generation, None, False)
    return GrantState(grant.status, access, grant.expires_at, grant.generation, grant.refreshing_until,
                      bool(grant.refresh_token))


def oauth_refresh_claim(*, name: str, generation: int) -> McpServerOAuth | None:
    """Claim the refresh of the grant at this generation: the grant when this caller won it, None when another
    process holds the claim or has refreshed already."""
    now = timezone.now()
    won = McpServerOAuth.objects.filter(
        Q(refreshing_until__isnull=True) | Q(refreshing_until__lt=now), server__name=name, generation=generation,
        status=McpServerOAuth.AUTHORIZED).update(refreshing_until=now + REFRESH_CLAIM)
    return McpServerOAuth.objects.select_related("server").get(server__name=name) if won == 1 else None


def _refreshed_store(*, name: str, generation: int, tokens: Tokens) -> bool:
    return McpServerOAuth.objects.filter(server__name=name, generation=generation).update(
        **_token_changes(tokens, generation=generation)) == 1


def _claim_release(*, name: str, generation: int) -> None:
    McpServerOAuth.objects.filter(server__name=name, generation=generation).update(refreshing_until=None)


def _expiring(state: GrantState) -> bool:
    return state.expires_at is not None and state.expires_at - timezone.now() <= REFRESH_MARGIN


async def bearer_token(name: str, *, rejected: str = "") -> str:
    """A usable access token for the server: refreshed first when it ends within 60 s, or when it is still the
    `rejected` one (the server answered 401 to it). Raises NeedsAuthorization, RefreshUnavailable."""
    deadline = asyncio.get_running_loop().time() + REFRESH_CLAIM.total_seconds() + 5
    while True:
        state = await db(_grant_state, name)
        if state is None or state.status != McpServerOAuth.AUTHORIZED or not state.access_token:
            raise NeedsAuthorization(f"The MCP server {name!r} needs authorization: reconnect it.")
        if state.access_token != rejected and not _expiring(state):
            return state.access_token
        if not state.has_refresh_token:
            await db(oauth_needs_authorization, name=name, reason="The access token ended and the server gave no "
                                                                  "refresh token.")
            raise NeedsAuthorization(f"The MCP server {name!r} needs authorization: reconnect it.")
        grant = await db(oauth_refresh_claim, name=name, generation=state.generation)
        if grant is not None:
            return await _refresh(name, grant)
        if asyncio.get_running_loop().time() > deadline:
            raise RefreshUnavailable(f"Another process's refresh of {name!r} did not finish in time.")
        await asyncio.sleep(REFRESH_POLL_S)  # another process is refreshing: its tokens appear in the row


async def _refresh(name: str, grant: McpServerOAuth) -> str:
    # Start-up cost: oauthclient imports the mcp package (half a second); only a process that uses OAuth pays it.
    from mcpbridge.oauthclient import GrantRefused, OAuthProblem, refresh

    try:
        tokens = await refresh(registration=await db(registration_of, grant), token_endpoint=grant.token_endpoint,
                               refresh_token=unseal(grant.refresh_token, purpose=TOKEN_PURPOSE),
                               resource=grant.resource)
    except GrantRefused as exc:
        await db(oauth_needs_authorization, name=name, reason=f"The refresh was refused: {exc}")
        raise NeedsAuthorization(f"The MCP server {name!r} needs authorization: {exc}") from None
    except (OAuthProblem, Exception) as exc:  # noqa: BLE001 - a boundary: any failure leaves the grant for a retry
        await db(_claim_release, name=name, generation=grant.generation)
        logger.warning("Refreshing the OAuth token of MCP server %r failed: %s", name, exc)
        raise RefreshUnavailable(f"Refreshing the token of {name!r} failed: {exc}") from None
    if not await db(_refreshed_store, name=name, generation=grant.generation, tokens=tokens):
        # Disconnected or reconnected meanwhile: the new tokens belong to no current grant.
        raise NeedsAuthorization(f"The MCP server {name!r} changed during its refresh: reconnect it.")
    logger.info("Refreshed the OAuth token of MCP server %r", name)
    return tokens.access_token


class OAuthBearer(httpx2.Auth):
    """The auth of an OAuth server's connection: the current access token on each request (refreshed before it
    ends), and on a 401 one refresh and one retry; a second 401 means the grant is gone."""

    def __init__(self, name: str):
        self.name = name

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        token = await bearer_token(self.name)
        request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code != 401:
            return
        token = await bearer_token(self.name, rejected=token)
        request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code == 401:
            await db(oauth_needs_authorization, name=self.name, reason="The server refused a fresh access token.")

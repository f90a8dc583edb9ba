"""The OAuth client side of the MCP authorization spec, with no database: discovery of a remote MCP server's
authorization server, dynamic registration, the authorization URL, the code exchange and the refresh.

Discovery and registration use the MCP SDK's helpers (mcp.client.auth.utils: the candidate URLs and the
metadata's models), the authorization URL, PKCE, the exchange and the refresh Authlib's client. Invariant:
every request, to a discovered URL too, goes through the SSRF guard (`guarded_client`), and no redirect is
followed (a redirect would escape it).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx2
from authlib.integrations.httpx_client import AsyncOAuth2Client, OAuthError
from mcp.client.auth import OAuthRegistrationError
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    create_client_registration_request,
    create_oauth_metadata_request,
    extract_resource_metadata_from_www_auth,
    extract_scope_from_www_auth,
    get_client_metadata_scopes,
    handle_auth_metadata_response,
    handle_protected_resource_response,
    handle_registration_response,
    issuers_match,
)
from mcp.shared.auth import OAuthClientMetadata, OAuthMetadata, ProtectedResourceMetadata

from agentsite.agent.builtin.netguard import AddressPolicy
from agentsite.agent.builtin.web_fetch import private_fetch_allowed
from agentsite.agent.tools import ToolError

logger = logging.getLogger(__name__)

HTTP_TIMEOUT_S = 20.0
CLIENT_NAME = "agentsite"
# The token endpoint's answers that end a grant (RFC 6749 5.2): anything else (a 5xx, a timeout,
# temporarily_unavailable) may pass, and a refresh that met it is tried again later.
REFUSALS = frozenset({"invalid_grant", "invalid_client", "unauthorized_client", "invalid_scope"})
INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": CLIENT_NAME, "version": "1"}}}


class OAuthProblem(Exception):
    """Discovery, registration, the exchange or a refresh failed; str() says why, in the remote's words."""

    def __init__(self, message: str, code: str = "oauth_failed"):
        super().__init__(message)
        self.code = code


class GrantRefused(OAuthProblem):
    """The authorization server refused the grant (`invalid_grant` and the like): only a new consent helps."""


def issuer_problem(iss: str | None, *, issuer: str, required: bool) -> str:
    """Why an authorization response's `iss` (RFC 9207; None when absent) does not show it came from `issuer`, the
    authorization server the request went to ("" when it does): a present `iss` must name it, and an absent one is
    refused when the server's metadata promised it (`required`). This is what stops a mix-up: a code another
    server handed back under this flow's state is never sent to this flow's token endpoint."""
    if iss is None:
        return "the response does not name its issuer, which the authorization server promised" if required else ""
    if not issuer or not issuers_match(iss, issuer):
        return f"the response names the issuer {iss[:200]!r}, not {issuer!r}"
    return ""


@dataclass(frozen=True)
class Discovered:
    """What discovery found for one MCP server URL."""

    resource: str
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    registration_endpoint: str
    scopes: str  # the scope to ask for (space-separated; empty: none)
    metadata: OAuthMetadata


@dataclass(frozen=True)
class Registration:
    """The client this service is at the authorization server."""

    client_id: str
    client_secret: str
    token_endpoint_auth_method: str


@dataclass(frozen=True)
class Tokens:
    """A token response: `expires_in` None when the server did not say."""

    access_token: str
    refresh_token: str
    expires_in: int | None
    scope: str


async def _guard(request: httpx2.Request) -> None:
    url = request.url
    if url.scheme not in ("http", "https"):
        raise OAuthProblem(f"Refusing to fetch {url.scheme}: URLs.")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        address = await AddressPolicy(allow_private=private_fetch_allowed()).pin(url.host, port)
    except ToolError as exc:
        raise OAuthProblem(str(exc)) from None
    # The request goes to the address just checked: a second lookup could answer another (DNS rebinding). The
    # name stays in the Host header and in TLS (SNI and the certificate check).
    request.headers["Host"] = url.netloc.decode("ascii")
    if url.scheme == "https":
        request.extensions = {**request.extensions, "sni_hostname": url.host}
    request.url = url.copy_with(host=address)


def guarded_client() -> httpx2.AsyncClient:
    """An HTTP client whose every request passes the SSRF guard, following no redirect."""
    return httpx2.AsyncClient(follow_redirects=False, timeout=HTTP_TIMEOUT_S, event_hooks={"request": [_guard]})


def _oauth_client(registration: Registration, **kwargs: Any) -> AsyncOAuth2Client:
    return AsyncOAuth2Client(
        client_id=registration.client_id, client_secret=registration.client_secret or None,
        token_endpoint_auth_method=registration.token_endpoint_auth_method, code_challenge_method="S256",
        follow_redirects=False, timeout=HTTP_TIMEOUT_S, event_hooks={"request": [_guard]}, **kwargs)


async def discover(url: str, *, authorization_server: str = "", scopes: str = "") -> Discovered:
    """Follow the MCP spec from the server's URL: its 401's `resource_metadata` (else the well-known protected
    resource metadata), then its authorization server's metadata (RFC 8414, else OpenID discovery);
    `authorization_server` when the server publishes none. Raises OAuthProblem."""
    try:
        async with guarded_client() as http:
            probe = await http.post(url, json=INITIALIZE, headers={
                "Accept": "application/json, text/event-stream", "Content-Type": "application/json"})
            challenge = extract_resource_metadata_from_www_auth(probe) if probe.status_code in (401, 403) else None
            resource = await _resource_metadata(http, challenge, url)
            issuer = str(resource.authorization_servers[0]) if resource and resource.authorization_servers else ""
            issuer = issuer or authorization_server
            metadata = await _server_metadata(http, issuer, url)
    except httpx2.HTTPError as exc:
        raise OAuthProblem(f"Discovery failed: {type(exc).__name__}: {exc}") from None
    asked = scopes or get_client_metadata_scopes(
        extract_scope_from_www_auth(probe) if probe.status_code in (401, 403) else None, resource, metadata) or ""
    return Discovered(resource=_resource_of(resource, url), issuer=str(metadata.issuer),
                      authorization_endpoint=str(metadata.authorization_endpoint),
                      token_endpoint=str(metadata.token_endpoint),
                      registration_endpoint=str(metadata.registration_endpoint or ""), scopes=asked, metadata=metadata)


async def _resource_metadata(http: httpx2.AsyncClient, challenge: str | None,
                             url: str) -> ProtectedResourceMetadata | None:
    for candidate in build_protected_resource_metadata_discovery_urls(challenge, url):
        found = await handle_protected_resource_response(await http.send(create_oauth_metadata_request(candidate)))
        if found is not None:
            return found
    return None


async def _server_metadata(http: httpx2.AsyncClient, issuer: str, url: str) -> OAuthMetadata:
    for candidate in build_oauth_authorization_server_metadata_discovery_urls(issuer or None, url):
        go_on, metadata = await handle_auth_metadata_response(await http.send(create_oauth_metadata_request(candidate)))
        if metadata is not None:
            if issuer and not issuers_match(str(metadata.issuer), issuer):
                raise OAuthProblem(f"The authorization server's metadata names the issuer {metadata.issuer}, "
                                   f"not {issuer}.")
            return metadata
        if not go_on:
            break
    where = issuer or urlsplit(url).netloc
    raise OAuthProblem(f"No OAuth authorization server metadata found for {where}: the server publishes none; "
                       "give authorization_server.", code="no_authorization_server")


def _resource_of(resource: ProtectedResourceMetadata | None, url: str) -> str:
    if resource is None:
        return url
    named = str(resource.resource)
    mine, theirs = urlsplit(url), urlsplit(named)
    if (mine.scheme, mine.netloc) != (theirs.scheme, theirs.netloc):
        raise OAuthProblem(f"The server's metadata names the resource {named}, on another origin than {url}.")
    # pydantic's AnyUrl adds a "/" to a bare origin: the resource is sent as the server wrote it otherwise.
    return url if named.rstrip("/") == url.rstrip("/") else named


async def register(found: Discovered, *, redirect_uri: str) -> Registration:
    """Register this service as a public client (RFC 7591). Raises OAuthProblem."""
    metadata = OAuthClientMetadata(
        client_name=CLIENT_NAME, redirect_uris=[redirect_uri],  # type: ignore[list-item]
        grant_types=["authorization_code", "refresh_token"], response_types=["code"],
        token_endpoint_auth_method="none", scope=found.scopes or None)
    if not found.registration_endpoint:
        raise OAuthProblem("The authorization server offers no dynamic registration: give client_id.",
                           code="registration_unsupported")
    request = create_client_registration_request(found.metadata, metadata, found.issuer)
    try:
        async with guarded_client() as http:
            info = await handle_registration_response(await http.send(request))
    except (OAuthRegistrationError, httpx2.HTTPError) as exc:
        raise OAuthProblem(f"Registration failed: {exc}", code="registration_failed") from None
    return Registration(client_id=info.client_id or "", client_secret=info.client_secret or "",
                        token_endpoint_auth_method=info.token_endpoint_auth_method or "none")


async def authorization_url(*, registration: Registration, authorization_endpoint: str, redirect_uri: str,
                            scopes: str, resource: str, state: str, code_verifier: str) -> str:
    """Where the admin consents: the code flow with PKCE S256 and the RFC 8707 `resource`."""
    async with _oauth_client(registration, redirect_uri=redirect_uri, scope=scopes or None) as client:
        url, _state = client.create_authorization_url(authorization_endpoint, state=state,
                                                      code_verifier=code_verifier, resource=resource)
    return str(url)


async def exchange(*, registration: Registration, token_endpoint: str, redirect_uri: str, code: str,
                   code_verifier: str, resource: str) -> Tokens:
    """Trade the authorization code for tokens. Raises GrantRefused, OAuthProblem."""
    async with _oauth_client(registration, redirect_uri=redirect_uri) as client:
        return await _token_call(client.fetch_token(token_endpoint, grant_type="authorization_code", code=code,
                                                    code_verifier=code_verifier, resource=resource))


async def refresh(*, registration: Registration, token_endpoint: str, refresh_token: str, resource: str) -> Tokens:
    """A new access token (and, when the server rotates them, refresh token). Raises GrantRefused, OAuthProblem."""
    async with _oauth_client(registration) as client:
        tokens = await _token_call(client.refresh_token(token_endpoint, refresh_token=refresh_token,
                                                        resource=resource))
    return tokens if tokens.refresh_token else Tokens(tokens.access_token, refresh_token, tokens.expires_in,
                                                      tokens.scope)


async def _token_call(call: Any) -> Tokens:
    try:
        token = await call
    except OAuthError as exc:
        message = f"The authorization server answered {exc.error}" + (f": {exc.description}" * bool(exc.description))
        raise (GrantRefused if exc.error in REFUSALS else OAuthProblem)(message, code=exc.error) from None
    except (httpx2.HTTPError, ValueError, json.JSONDecodeError) as exc:
        raise OAuthProblem(f"The token request failed: {type(exc).__name__}: {exc}",
                           code="token_request_failed") from None
    if not token.get("access_token"):
        raise OAuthProblem("The token response holds no access_token.", code="token_request_failed")
    expires_in = token.get("expires_in")
    return Tokens(access_token=str(token["access_token"]), refresh_token=str(token.get("refresh_token") or ""),
                  expires_in=int(expires_in) if expires_in is not None else None, scope=str(token.get("scope") or ""))

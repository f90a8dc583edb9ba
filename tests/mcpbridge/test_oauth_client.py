"""The OAuth client's pieces against a loopback authorization server (a fake: the protocol's other side, as a
remote deployment would run it): discovery and registration on connect, the pending flow (single use, ten
minutes), the callback's refusals, and the refresh (before the token ends, one at a time across processes,
a refusal putting the server in `needs_authorization`). The whole flow against a real agentsite runs in
test_oauth_client_e2e.py."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from agentsite.agent.tools import ToolContext
from agentsite.core.secretbox import seal, unseal
from mcpbridge import oauthclient, oauthgrant
from mcpbridge.models import McpOAuthFlow, McpServer, McpServerOAuth
from mcpbridge.oauthgrant import (
    TOKEN_PURPOSE,
    VERIFIER_PURPOSE,
    NeedsAuthorization,
    RefreshUnavailable,
    bearer_token,
    oauth_flow_create,
    oauth_flow_take,
    oauth_refresh_claim,
    state_digest,
)
from mcpbridge.selectors import mcp_server_specs_for

pytestmark = pytest.mark.django_db(transaction=True)  # the grant is read and claimed on other threads

# Imported here, not within a refresh a test times: the mcp package it brings takes seconds on a cold start.
assert oauthclient.REFUSALS

NAME = "remote"


class FakeAuthorizationServer:
    """An MCP server's 401 and an authorization server on loopback. `prm`: where the resource metadata is
    published ("header": named by the 401, "well-known": only there, "none"); `token_answers`: the token
    endpoint's next answers, (status, body); `hold`: an event the token endpoint waits for first."""

    def __init__(self) -> None:
        self.prm = "header"
        self.iss_supported: bool | None = None  # the metadata's authorization_response_iss_parameter_supported
        self.token_answers: list[tuple[int, dict]] = []
        self.token_requests: list[dict[str, list[str]]] = []
        self.registrations: list[dict] = []
        self.hold: threading.Event | None = None
        self.arrived = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _json(self, status: int, body: dict, headers: dict | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                base = fake.base_url
                if self.path == "/.well-known/oauth-protected-resource/mcp" and fake.prm != "none":
                    return self._json(200, {"resource": f"{base}/mcp", "authorization_servers": [base],
                                            "scopes_supported": ["mcp"]})
                if self.path == "/.well-known/oauth-authorization-server" and fake.prm != "none":
                    return self._json(200, fake.metadata())
                if self.path == "/issuer/.well-known/openid-configuration":
                    return self._json(200, fake.metadata("/issuer"))
                return self._json(404, {"error": "not_found"})

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path == "/mcp":
                    named = f', resource_metadata="{fake.base_url}/.well-known/oauth-protected-resource/mcp"'
                    challenge = 'Bearer scope="mcp"' + (named if fake.prm == "header" else "")
                    return self._json(401, {"error": "unauthorized"}, {"WWW-Authenticate": challenge})
                if self.path.endswith("/register"):
                    fake.registrations.append(json.loads(body))
                    return self._json(201, {"client_id": f"client-{len(fake.registrations)}",
                                            "redirect_uris": json.loads(body)["redirect_uris"],
                                            "token_endpoint_auth_method": "none"})
                if self.path.endswith("/token"):
                    fake.token_requests.append(parse_qs(body.decode()))
                    fake.arrived.set()
                    if fake.hold is not None:
                        fake.hold.wait(5)
                    status, answer = fake.token_answers.pop(0) if fake.token_answers else (500, {})
                    return self._json(status, answer)
                return self._json(404, {"error": "not_found"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def metadata(self, path: str = "") -> dict:
        issuer = self.base_url + path
        found = {"issuer": issuer, "authorization_endpoint": f"{issuer}/authorize", "token_endpoint": f"{issuer}/token",
                 "registration_endpoint": f"{issuer}/register", "response_types_supported": ["code"],
                 "code_challenge_methods_supported": ["S256"]}
        if self.iss_supported is not None:
            found["authorization_response_iss_parameter_supported"] = self.iss_supported
        return found

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake(settings) -> Iterator[FakeAuthorizationServer]:
    settings.AGENTSITE_ALLOW_PRIVATE_FETCH = True
    server = FakeAuthorizationServer()
    yield server
    if server.hold is not None:
        server.hold.set()
    server.close()


def authorized(fake: FakeAuthorizationServer, *, ends_in: timedelta | None = timedelta(hours=1),
               refresh_token: str = "rt-1") -> McpServerOAuth:
    """A stored OAuth server with a grant (as a completed callback leaves it)."""
    server = McpServer.objects.create(name=NAME, transport="streamable-http", url=f"{fake.base_url}/mcp",
                                      auth=McpServer.OAUTH, status=McpServer.CONNECTED)
    return McpServerOAuth.objects.create(
        server=server, status=McpServerOAuth.AUTHORIZED, resource=f"{fake.base_url}/mcp", issuer=fake.base_url,
        authorization_endpoint=f"{fake.base_url}/authorize", token_endpoint=f"{fake.base_url}/token",
        client_id="client-1", redirect_uri="http://testserver/api/mcp/oauth/callback", requested_scopes="mcp",
        access_token=seal("at-1", purpose=TOKEN_PURPOSE),
        refresh_token=seal(refresh_token, purpose=TOKEN_PURPOSE) if refresh_token else "",
        expires_at=timezone.now() + ends_in if ends_in is not None else None, scopes="mcp")


def rotated(number: int) -> tuple[int, dict]:
    return 200, {"access_token": f"at-{number}", "refresh_token": f"rt-{number}", "token_type": "Bearer",
                 "expires_in": 3600, "scope": "mcp"}


# --- connect: discovery and registration ------------------------------------------------------------------

def test_connect_with_oauth_discovers_registers_and_answers_202_with_a_pkce_authorization_url(admin_client, fake):
    response = admin_client.post("/api/mcp/connect", {"name": NAME, "url": f"{fake.base_url}/mcp", "auth": "oauth"},
                                 format="json")

    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status"] == "needs_authorization"
    assert (body["server"]["status"], body["server"]["auth"], body["server"]["oauth"]) == (
        "needs_authorization", "oauth", {"status": "needs_authorization", "expires_at": None, "scopes": ["mcp"]})
    assert fake.registrations[0]["redirect_uris"] == ["http://testserver/api/mcp/oauth/callback"]
    assert fake.registrations[0]["token_endpoint_auth_method"] == "none"
    url = urlsplit(body["authorization_url"])
    asked = {key: values[0] for key, values in parse_qs(url.query).items()}
    assert f"{url.scheme}://{url.netloc}{url.path}" == f"{fake.base_url}/authorize"
    assert {key: asked[key] for key in ("response_type", "client_id", "scope", "resource", "code_challenge_method")} \
        == {"response_type": "code", "client_id": "client-1", "scope": "mcp", "resource": f"{fake.base_url}/mcp",
            "code_challenge_method": "S256"}
    flow = McpOAuthFlow.objects.get()
    assert flow.state_digest == state_digest(asked["state"]) and asked["state"] not in flow.state_digest
    verifier = unseal(flow.code_verifier, purpose=VERIFIER_PURPOSE)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    assert asked["code_challenge"] == challenge
    grant = McpServerOAuth.objects.get()
    assert (grant.client_id, grant.token_endpoint, grant.issuer) == ("client-1", f"{fake.base_url}/token",
                                                                     fake.base_url)


def test_discovery_reads_the_well_known_resource_metadata_when_the_401_names_none(admin_client, fake):
    fake.prm = "well-known"
    response = admin_client.post("/api/mcp/connect", {"name": NAME, "url": f"{fake.base_url}/mcp", "auth": "oauth"},
                                 format="json")
    assert response.status_code == 202, response.content
    assert McpServerOAuth.objects.get().token_endpoint == f"{fake.base_url}/token"


def test_a_given_authorization_server_is_used_when_the_server_publishes_none(admin_client, fake):
    fake.prm = "none"
    body = {"name": NAME, "url": f"{fake.base_url}/mcp", "auth": "oauth"}
    refused = admin_client.post("/api/mcp/connect", body, format="json")
    assert refused.status_code == 502 and refused.json()["error"]["code"] == "mcp_connect_failed"
    assert not McpServer.objects.exists()

    given = admin_client.post("/api/mcp/connect", {**body, "authorization_server": f"{fake.base_url}/issuer"},
                              format="json")
    assert given.status_code == 202, given.content
    assert McpServerOAuth.objects.get().token_endpoint == f"{fake.base_url}/issuer/token"


def test_a_given_client_id_is_used_without_registering_and_its_secret_is_kept_sealed(admin_client, fake):
    response = admin_client.post("/api/mcp/connect", {
        "name": NAME, "url": f"{fake.base_url}/mcp", "auth": "oauth", "client_id": "mine",
        "client_secret": "s3cret-value", "scopes": ["mcp", "extra"]}, format="json")
    assert response.status_code == 202, response.content
    assert fake.registrations == []
    grant = McpServerOAuth.objects.get()
    assert (grant.client_id, grant.token_endpoint_auth_method, grant.requested_scopes) == (
        "mine", "client_secret_basic", "mcp extra")
    assert "s3cret-value" not in grant.client_secret and "s3cret-value" not in response.content.decode()
    assert parse_qs(urlsplit(response.json()["authorization_url"]).query)["scope"] == ["mcp extra"]


def test_discovery_of_a_private_address_is_refused_while_private_fetches_are_off(admin_client, fake, settings):
    settings.AGENTSITE_ALLOW_PRIVATE_FETCH = False
    response = admin_client.post("/api/mcp/connect", {"name": NAME, "url": f"{fake.base_url}/mcp", "auth": "oauth"},
                                 format="json")
    assert response.status_code == 400 and "url" in response.json()["error"]["details"]
    assert fake.registrations == [] and not McpServer.objects.exists()


@pytest.mark.parametrize(("body", "field"), [
    ({"name": NAME, "command": "x", "auth": "oauth"}, "auth"),
    ({"name": NAME, "url": "https://example.com/mcp", "auth": "oauth", "headers": {"A": "b"}}, "headers"),
    ({"name": NAME, "url": "https://example.com/mcp", "auth": "oauth", "client_secret": "s"}, "client_secret"),
    ({"name": NAME, "url": "https://example.com/mcp", "scopes": ["mcp"]}, "scopes"),
    ({"name": NAME, "url": "https://example.com/mcp", "auth": "basic"}, "auth"),
])
def test_a_connect_request_that_mixes_oauth_with_what_it_does_not_go_with_answers_400(admin_client, body, field):
    response = admin_client.post("/api/mcp/connect", body, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid" and field in response.json()["error"]["details"]


def test_reconnect_of_a_server_without_oauth_answers_400_and_of_no_server_404(admin_client):
    McpServer.objects.create(name="plain", transport="stdio", command="x")
    assert admin_client.post("/api/mcp/servers/plain/reconnect").status_code == 400
    assert admin_client.post("/api/mcp/servers/nothing/reconnect").status_code == 404


def test_reconnect_starts_a_new_authorization_and_is_for_admins_only(admin_client, owner_client, fake):
    authorized(fake)
    assert owner_client.post(f"/api/mcp/servers/{NAME}/reconnect").status_code == 403
    response = admin_client.post(f"/api/mcp/servers/{NAME}/reconnect")
    assert response.status_code == 202, response.content
    assert response.json()["authorization_url"].startswith(f"{fake.base_url}/authorize?")
    assert McpOAuthFlow.objects.count() == 1


# --- the pending flow and the callback ------------------------------------------------------------------

def test_a_pending_flow_is_taken_once(fake):
    grant = authorized(fake)
    started = oauth_flow_create(server=grant.server)
    taken = oauth_flow_take(state=started.state)
    assert taken is not None and taken.code_verifier == started.code_verifier
    assert oauth_flow_take(state=started.state) is None


@pytest.mark.parametrize(("age", "usable"), [(timedelta(minutes=9, seconds=58), True),
                                             (timedelta(minutes=10, seconds=1), False)])
def test_a_pending_flow_lasts_ten_minutes(fake, age, usable):
    grant = authorized(fake)
    started = oauth_flow_create(server=grant.server)
    McpOAuthFlow.objects.update(expires_at=timezone.now() + oauthgrant.FLOW_TTL - age)
    assert (oauth_flow_take(state=started.state) is not None) is usable


def test_a_callback_with_an_unknown_state_goes_back_with_invalid_state(anon_client):
    response = anon_client.get("/api/mcp/oauth/callback", {"code": "c", "state": "unknown"})
    assert response.status_code == 302
    assert response["Location"] == "/#/mcp?oauth_error=invalid_state"


def test_a_refused_consent_goes_back_with_its_error_and_the_server_still_needs_authorization(anon_client, fake):
    grant = authorized(fake)
    McpServer.objects.update(status=McpServer.NEEDS_AUTHORIZATION)
    started = oauth_flow_create(server=grant.server)
    response = anon_client.get("/api/mcp/oauth/callback", {"error": "access_denied", "state": started.state})
    assert response["Location"] == f"/#/mcp?oauth_error=access_denied&server={NAME}"
    assert McpServer.objects.get().status == McpServer.NEEDS_AUTHORIZATION and fake.token_requests == []


def test_a_code_the_token_endpoint_refuses_goes_back_with_its_error(anon_client, fake):
    grant = authorized(fake)
    started = oauth_flow_create(server=grant.server)
    fake.token_answers.append((400, {"error": "invalid_grant"}))
    response = anon_client.get("/api/mcp/oauth/callback", {"code": "bad", "state": started.state})
    assert response["Location"] == f"/#/mcp?oauth_error=invalid_grant&server={NAME}"
    sent = fake.token_requests[0]
    assert (sent["grant_type"], sent["code"], sent["code_verifier"], sent["resource"]) == (
        ["authorization_code"], ["bad"], [started.code_verifier], [f"{fake.base_url}/mcp"])


@pytest.mark.parametrize("supported", [None, False, True])
def test_connect_keeps_whether_the_authorization_server_names_itself_in_its_responses(admin_client, fake, supported):
    fake.iss_supported = supported
    response = admin_client.post("/api/mcp/connect", {"name": NAME, "url": f"{fake.base_url}/mcp", "auth": "oauth"},
                                 format="json")
    assert response.status_code == 202, response.content
    assert McpServerOAuth.objects.get().issuer_in_response is bool(supported)


@pytest.mark.parametrize(("iss", "promised", "outcome"), [
    ("https://attacker.example", False, "invalid_issuer"),  # another server's answer under this flow's state
    ("https://attacker.example", True, "invalid_issuer"),
    ("{base}/other", False, "invalid_issuer"),
    (None, True, "invalid_issuer"),  # promised by the metadata, and missing
    (None, False, "invalid_grant"),  # not promised: the code goes on to the token endpoint (which refuses it here)
    ("{base}", True, "invalid_grant"),
    ("{base}/", True, "invalid_grant"),  # a root issuer with or without its slash (RFC 8414 names it either way)
])
def test_a_callback_is_checked_against_the_issuer_asked_before_its_code_is_exchanged(anon_client, fake, iss, promised,
                                                                                       outcome):
    grant = authorized(fake)
    McpServerOAuth.objects.filter(pk=grant.pk).update(issuer_in_response=promised)
    started = oauth_flow_create(server=grant.server)
    fake.token_answers.append((400, {"error": "invalid_grant"}))
    query = {"code": "c", "state": started.state, **({"iss": iss.format(base=fake.base_url)} if iss else {})}

    response = anon_client.get("/api/mcp/oauth/callback", query)

    assert response["Location"] == f"/#/mcp?oauth_error={outcome}&server={NAME}"
    assert len(fake.token_requests) == (outcome != "invalid_issuer")  # a refused response's code is never sent
    again = anon_client.get("/api/mcp/oauth/callback", query)
    assert again["Location"] == "/#/mcp?oauth_error=invalid_state"  # the flow was used up either way


# --- the refresh ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("ends_in", "refreshed"), [(timedelta(seconds=62), False), (timedelta(seconds=58), True)])
def test_an_access_token_ending_within_60_s_is_refreshed_before_use(fake, ends_in, refreshed):
    authorized(fake, ends_in=ends_in)
    fake.token_answers.append(rotated(2))

    token = async_to_sync(bearer_token)(NAME)

    assert token == ("at-2" if refreshed else "at-1")
    assert len(fake.token_requests) == int(refreshed)
    if refreshed:
        sent = fake.token_requests[0]
        assert (sent["grant_type"], sent["refresh_token"], sent["resource"]) == (
            ["refresh_token"], ["rt-1"], [f"{fake.base_url}/mcp"])
        grant = McpServerOAuth.objects.get()
        assert unseal(grant.refresh_token, purpose=TOKEN_PURPOSE) == "rt-2" and grant.generation == 1


def test_a_token_the_server_rejected_is_refreshed_even_before_it_ends(fake):
    authorized(fake)
    fake.token_answers.append(rotated(2))
    assert async_to_sync(bearer_token)(NAME, rejected="at-1") == "at-2"
    assert async_to_sync(bearer_token)(NAME, rejected="at-1") == "at-2"  # already refreshed: not again
    assert len(fake.token_requests) == 1


def test_two_uses_at_once_make_one_refresh(fake, monkeypatch):
    authorized(fake, ends_in=timedelta(seconds=10))
    fake.token_answers.extend([rotated(2), rotated(3)])
    fake.hold = threading.Event()
    claims: list[bool] = []
    claim = oauthgrant.oauth_refresh_claim

    def counted(**kwargs):
        won = claim(**kwargs)
        claims.append(won is not None)
        if len(claims) == 2:
            fake.hold.set()  # the second use has tried to claim while the first's refresh is held
        return won

    monkeypatch.setattr(oauthgrant, "oauth_refresh_claim", counted)

    async def both() -> list[str]:
        first = asyncio.ensure_future(bearer_token(NAME))
        deadline = time.monotonic() + 5
        while not fake.arrived.is_set():
            assert time.monotonic() < deadline, "the first refresh never reached the token endpoint"
            await asyncio.sleep(0.01)
        second = asyncio.ensure_future(bearer_token(NAME))
        return list(await asyncio.gather(first, second))

    tokens = async_to_sync(both)()

    assert tokens == ["at-2", "at-2"] and len(fake.token_requests) == 1 and claims[:2] == [True, False]


def test_the_refresh_claim_is_one_per_generation_and_a_stale_claim_is_taken_over(fake):
    authorized(fake)
    assert oauth_refresh_claim(name=NAME, generation=0) is not None
    assert oauth_refresh_claim(name=NAME, generation=0) is None
    assert oauth_refresh_claim(name=NAME, generation=1) is None
    McpServerOAuth.objects.update(refreshing_until=timezone.now() - timedelta(seconds=1))
    assert oauth_refresh_claim(name=NAME, generation=0) is not None


def test_a_refused_refresh_puts_the_server_in_needs_authorization_and_its_tools_out_of_listings(fake, admin):
    authorized(fake, ends_in=timedelta(seconds=0))
    fake.token_answers.append((400, {"error": "invalid_grant", "error_description": "revoked"}))
    caller = ToolContext(user_id=admin.pk, is_admin=True)
    assert [spec.name for spec in mcp_server_specs_for(caller)[1]] == [NAME]

    with pytest.raises(NeedsAuthorization):
        async_to_sync(bearer_token)(NAME)

    server, grant = McpServer.objects.get(), McpServerOAuth.objects.get()
    assert (server.status, grant.status, grant.access_token, grant.refresh_token) == (
        McpServer.NEEDS_AUTHORIZATION, McpServerOAuth.NEEDS_AUTHORIZATION, "", "")
    assert mcp_server_specs_for(caller)[1] == []
    with pytest.raises(NeedsAuthorization):  # no second refresh of a dead grant
        async_to_sync(bearer_token)(NAME)
    assert len(fake.token_requests) == 1


def test_a_refresh_that_fails_for_the_authorization_servers_own_fault_keeps_the_grant(fake):
    authorized(fake, ends_in=timedelta(seconds=0))
    fake.token_answers.extend([(503, {"error": "temporarily_unavailable"}), rotated(2)])

    with pytest.raises(RefreshUnavailable):
        async_to_sync(bearer_token)(NAME)
    grant = McpServerOAuth.objects.get()
    assert (grant.status, grant.refreshing_until, McpServer.objects.get().status) == (
        McpServerOAuth.AUTHORIZED, None, McpServer.CONNECTED)
    assert async_to_sync(bearer_token)(NAME) == "at-2"


def test_an_ended_token_without_a_refresh_token_needs_authorization(fake):
    authorized(fake, ends_in=timedelta(seconds=0), refresh_token="")
    with pytest.raises(NeedsAuthorization):
        async_to_sync(bearer_token)(NAME)
    assert McpServer.objects.get().status == McpServer.NEEDS_AUTHORIZATION and fake.token_requests == []


def test_the_listing_shows_the_grant_state_but_never_a_token(admin_client, fake):
    authorized(fake)
    McpServer.objects.update(status=McpServer.NEEDS_AUTHORIZATION)  # listed without connecting
    McpServerOAuth.objects.update(status=McpServerOAuth.NEEDS_AUTHORIZATION)
    response = admin_client.get("/api/mcp/servers")
    server = response.json()["servers"][0]
    assert (server["auth"], server["status"], server["tools"], server["oauth"]) == (
        "oauth", "needs_authorization", 0, {"status": "needs_authorization", "expires_at": None, "scopes": ["mcp"]})
    assert "at-1" not in response.content.decode() and "rt-1" not in response.content.decode()


def test_each_oauth_request_goes_to_the_address_the_guard_checked_not_to_a_second_lookup(settings, monkeypatch):
    """DNS rebinding: the name answers another address at each lookup. Every request must reach the address
    the guard checked for it (no second lookup), with the name in its Host header."""
    settings.AGENTSITE_ALLOW_PRIVATE_FETCH = True  # both addresses are loopback: the check itself is not the point
    reached: dict[str, list[str]] = {"127.0.0.1": [], "127.0.0.2": []}

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            reached[self.server.server_address[0]].append(self.headers.get("Host", ""))
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = _answer

        def log_message(self, *args) -> None:
            pass

    first = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port = first.server_address[1]
    second = ThreadingHTTPServer(("127.0.0.2", port), Handler)
    for server in (first, second):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    lookups = []
    real = socket.getaddrinfo

    def rebinding(host, *args, **kwargs):
        if host in ("rebind.test", b"rebind.test"):
            lookups.append(host)
            address = "127.0.0.1" if len(lookups) % 2 else "127.0.0.2"  # the check's, then another
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    try:
        with pytest.raises(oauthclient.OAuthProblem):  # 404 everywhere: nothing to discover
            async_to_sync(oauthclient.discover)(f"http://rebind.test:{port}/mcp")
    finally:
        first.shutdown()
        second.shutdown()
    arrived = reached["127.0.0.1"] + reached["127.0.0.2"]
    assert len(arrived) >= 2 and set(arrived) == {f"rebind.test:{port}"}, reached
    # One lookup per request, the guard's, whose answer the request went to: a second lookup (the connection's
    # own) would double them, and would have sent requests to an address no check saw.
    assert len(lookups) == len(arrived), (lookups, reached)
    assert len(reached["127.0.0.1"]) == (len(arrived) + 1) // 2, reached


def test_tokens_sealed_under_another_secret_key_put_the_server_in_needs_authorization(fake):
    grant = authorized(fake)
    McpServerOAuth.objects.filter(pk=grant.pk).update(access_token=seal("at-1", purpose="another purpose"))
    with pytest.raises(NeedsAuthorization):
        async_to_sync(bearer_token)(NAME)
    server = McpServer.objects.get()
    assert server.status == McpServer.NEEDS_AUTHORIZATION and "SECRET_KEY" in server.error
    assert fake.token_requests == []


def test_reconnect_when_the_client_secret_no_longer_opens_is_400_naming_what_to_do(admin_client, fake):
    grant = authorized(fake)
    McpServerOAuth.objects.filter(pk=grant.pk).update(client_secret=seal("s", purpose="another purpose"))
    response = admin_client.post(f"/api/mcp/servers/{NAME}/reconnect")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "invalid" and "client_secret" in response.json()["error"]["message"]

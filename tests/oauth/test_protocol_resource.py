"""The protected resource's side: the metadata documents a connector discovers the server by (RFC 9728, RFC 8414,
at the URLs the MCP SDK's client tries), the 401 and its WWW-Authenticate header at /mcp (RFC 6750 §3, RFC 9728
§5.1, in the form the SDK's client parses), and tokens refused there: for another resource, revoked, after a
refresh's reuse. Requests to /mcp go through the ASGI application daphne serves, in this process."""

from __future__ import annotations

import re
from typing import Any

import httpx2
import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    extract_field_from_www_auth,
    extract_resource_metadata_from_www_auth,
    extract_scope_from_www_auth,
)
from mcp.shared.auth import OAuthMetadata, ProtectedResourceMetadata

from oauth.models import AccessToken
from tests.oauth.conftest import code_for, connector, exchange, refresh, revoke

pytestmark = pytest.mark.django_db(transaction=True)

LOOPBACK = "http://127.0.0.1"
METADATA_URL = f"{LOOPBACK}/.well-known/oauth-protected-resource/mcp"
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}
CHALLENGE = re.compile(r'^Bearer resource_metadata="([^"]+)", scope="mcp"(?:, error="([a-z_]+)")?$')


def mcp_post(token: str | None = None, *, host: str = "127.0.0.1", path: str = "/mcp") -> httpx2.Response:
    """A POST at /mcp (an MCP initialize) or another of its paths, through the served ASGI application."""
    from agentsite.asgi import application  # the served application, built once Django is set up

    headers = {"Accept": "application/json, text/event-stream", "Host": host}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"

    async def send() -> httpx2.Response:
        transport = httpx2.ASGITransport(app=application, client=("127.0.0.1", 40000))
        async with httpx2.AsyncClient(transport=transport, base_url=LOOPBACK, timeout=10) as client:
            return await client.post(path, json=INITIALIZE, headers=headers)

    return async_to_sync(send)()


def accepted(token: str, host: str = "127.0.0.1") -> bool:
    """Whether /mcp takes the token: a POST to /mcp/sse passes authentication and is then refused 405 (the stream
    is opened with GET). The MCP session manager lives in the event loop of its first request, and each
    test's loop is new: sessions themselves are opened by the live tests (test_across_processes.py)."""
    response = mcp_post(token, host=host, path="/mcp/sse")
    assert response.status_code in (401, 405), (response.status_code, response.text)
    return response.status_code == 405


def loopback_tokens(http, owner, host: str = "127.0.0.1") -> tuple[Any, dict[str, Any]]:
    """A connector and its tokens for http://<host>/mcp."""
    client = connector(http)
    code = code_for(http, client, owner, host=host, resource=f"http://{host}/mcp")
    response = exchange(http, client, code, host=host)
    assert response.status_code == 200, response.content
    return client, response.json()


def challenge(response: httpx2.Response) -> tuple[str, str | None]:
    header = response.headers["WWW-Authenticate"]
    match = CHALLENGE.match(header)
    assert match, header
    return match.group(1), match.group(2)


# --- discovery -----------------------------------------------------------------------------------------------

def test_the_protected_resource_metadata_is_at_both_urls_the_sdk_tries(http):
    urls = build_protected_resource_metadata_discovery_urls(None, "http://testserver/mcp")
    assert urls == ["http://testserver/.well-known/oauth-protected-resource/mcp",
                    "http://testserver/.well-known/oauth-protected-resource"]
    for url in urls:
        response = http.get(url.removeprefix("http://testserver"))
        assert response.status_code == 200, url
        body = response.json()
        assert body == {"resource": "http://testserver/mcp", "authorization_servers": ["http://testserver"],
                        "scopes_supported": ["mcp"], "bearer_methods_supported": ["header"],
                        "resource_name": "agentsite MCP", "resource_documentation": "http://testserver/api/docs"}
        ProtectedResourceMetadata.model_validate(body)


def test_the_authorization_server_metadata_is_where_the_sdk_looks_first_and_names_its_issuer(http):
    urls = build_oauth_authorization_server_metadata_discovery_urls("http://testserver", "http://testserver/mcp")
    assert urls[0] == "http://testserver/.well-known/oauth-authorization-server"
    response = http.get("/.well-known/oauth-authorization-server")

    assert response.status_code == 200
    body = response.json()
    metadata = OAuthMetadata.model_validate(body)
    assert body["issuer"] == "http://testserver" and str(metadata.issuer).rstrip("/") == "http://testserver"
    assert body["code_challenge_methods_supported"] == ["S256"]
    assert body["authorization_endpoint"] == "http://testserver/oauth/authorize"
    assert body["registration_endpoint"] == "http://testserver/oauth/register"
    assert body["authorization_response_iss_parameter_supported"] is True  # RFC 9207: iss in every response
    assert metadata.authorization_response_iss_parameter_supported


def test_the_documents_name_the_host_the_request_came_to(http):
    body = http.get("/.well-known/oauth-protected-resource/mcp", HTTP_HOST="localhost:8000").json()
    assert body["resource"] == "http://localhost:8000/mcp"
    assert body["authorization_servers"] == ["http://localhost:8000"]
    secure = http.get("/.well-known/oauth-authorization-server", HTTP_HOST="localhost", secure=True).json()
    assert secure["issuer"] == "https://localhost"


# --- the 401 at /mcp -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/mcp", "/mcp/sse"])
def test_no_token_is_401_with_the_metadata_url_and_scope_and_no_error(path):
    response = mcp_post(path=path)

    assert response.status_code == 401
    assert challenge(response) == (METADATA_URL, None)
    assert extract_resource_metadata_from_www_auth(response) == METADATA_URL
    assert extract_scope_from_www_auth(response) == "mcp"
    assert extract_field_from_www_auth(response, "error") is None


def test_the_metadata_url_follows_the_host(http):
    response = mcp_post(host="localhost:9000")

    assert challenge(response)[0] == "http://localhost:9000/.well-known/oauth-protected-resource/mcp"


@pytest.mark.parametrize("token", ["asa-unknown", "asa-", "not-a-token-at-all"])
def test_a_dead_or_unknown_token_is_401_invalid_token(token):
    response = mcp_post(token)

    assert response.status_code == 401
    assert challenge(response) == (METADATA_URL, "invalid_token")


def test_a_live_token_for_this_resource_is_taken(http, owner):
    _, tokens = loopback_tokens(http, owner)

    assert accepted(tokens["access_token"])
    assert AccessToken.objects.get().resource == "http://127.0.0.1/mcp"


def test_a_token_whose_resource_was_written_in_capitals_with_a_slash_is_taken(http, owner):
    client = connector(http)
    code = code_for(http, client, owner, host="127.0.0.1", resource="HTTP://127.0.0.1/mcp/")
    tokens = exchange(http, client, code, host="127.0.0.1", resource="HTTP://127.0.0.1/mcp/").json()

    assert accepted(tokens["access_token"])


def test_a_token_issued_on_another_host_is_refused_invalid_token(http, owner):
    """Issued while the request's Host was localhost (another allowed host): its audience is
    http://localhost/mcp, not the 127.0.0.1 endpoint."""
    _, tokens = loopback_tokens(http, owner, host="localhost")

    refused = mcp_post(tokens["access_token"])

    assert refused.status_code == 401
    assert challenge(refused) == (METADATA_URL, "invalid_token")
    assert "another resource" in refused.json()["error"]["message"]
    assert accepted(tokens["access_token"], host="localhost") and not accepted(tokens["access_token"])


def test_a_revoked_token_is_refused_at_once(http, owner):
    client, tokens = loopback_tokens(http, owner)
    assert accepted(tokens["access_token"])  # now in this process's cache

    assert revoke(http, client, tokens["refresh_token"]).status_code == 200

    refused = mcp_post(tokens["access_token"])
    assert refused.status_code == 401 and challenge(refused)[1] == "invalid_token"


def test_a_reused_refresh_token_stops_the_newest_access_token_at_mcp(http, owner):
    client, first = loopback_tokens(http, owner)
    second = refresh(http, client, first["refresh_token"], resource="http://127.0.0.1/mcp").json()
    assert accepted(second["access_token"])
    assert not accepted(first["access_token"])  # rotated: the old access token ended with it

    reused = refresh(http, client, first["refresh_token"], resource="http://127.0.0.1/mcp")

    assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant"
    assert not accepted(second["access_token"])


def test_an_expired_access_token_is_refused(http, owner):
    _, tokens = loopback_tokens(http, owner)
    AccessToken.objects.update(expires_at=timezone.now())

    assert not accepted(tokens["access_token"])


def test_a_token_without_the_scope_is_403_insufficient_scope(http, owner):
    _, tokens = loopback_tokens(http, owner)
    AccessToken.objects.update(scope="other")

    response = mcp_post(tokens["access_token"])

    assert response.status_code == 403
    assert challenge(response) == (METADATA_URL, "insufficient_scope")

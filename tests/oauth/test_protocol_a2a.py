"""The second protected resource, `<origin>/a2a` (one for every agent's /a2a/<slug>), with its one scope `a2a`: its
metadata (RFC 9728), the code flow and refresh for it, the rule between scope and resource (the resource's
scope only; another is invalid_scope), and the audience: a token for /a2a is refused for /mcp and the reverse,
at oauth.tokens (what both doors call) and at the /mcp door itself."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from mcp.shared.auth import ProtectedResourceMetadata

from accounts.authentication import key_digest
from oauth import tokens as oauth_tokens
from oauth.models import AccessToken, AuthorizationCode
from oauth.resource import A2A_PATH, METADATA_PATH, a2a_metadata_url, a2a_resource_url, resource_url
from tests.conftest import client_for
from tests.oauth.conftest import (
    RESOURCE,
    authorize,
    code_for,
    connector,
    consent_id,
    decide,
    exchange,
    oauth_error,
    refresh,
    tokens_for,
)
from tests.oauth.test_protocol import sent_back
from tests.oauth.test_protocol_resource import accepted

pytestmark = pytest.mark.django_db

A2A_RESOURCE = "http://testserver/a2a"


@pytest.fixture(autouse=True)
def _fresh_token_cache():
    oauth_tokens.tokens.drop(None)
    yield
    oauth_tokens.tokens.drop(None)


def a2a_tokens(http, client, user, host: str = "testserver", **overrides) -> dict:
    """The whole code flow with PKCE for http://<host>/a2a: authorize, the user's consent, the exchange."""
    resource = f"http://{host}/a2a"
    code = code_for(http, client, user, host=host, resource=resource, **{"scope": "a2a", **overrides})
    response = exchange(http, client, code, host=host, resource=resource)
    assert response.status_code == 200, response.content
    return response.json()


def authenticate(access: str, resource: str, scope: str) -> oauth_tokens.Grant:
    return async_to_sync(oauth_tokens.aauthenticate)(access, resource=resource, scope=scope)


def refused(access: str, resource: str, scope: str) -> oauth_tokens.TokenRefused:
    with pytest.raises(oauth_tokens.TokenRefused) as caught:
        authenticate(access, resource, scope)
    return caught.value


# --- discovery -----------------------------------------------------------------------------------------------

def test_the_a2a_metadata_names_its_resource_its_one_scope_and_this_server(http):
    response = http.get("/.well-known/oauth-protected-resource/a2a")

    assert response.status_code == 200
    body = response.json()
    assert body == {"resource": "http://testserver/a2a", "authorization_servers": ["http://testserver"],
                    "scopes_supported": ["a2a"], "bearer_methods_supported": ["header"],
                    "resource_name": "agentsite A2A", "resource_documentation": "http://testserver/api/docs"}
    ProtectedResourceMetadata.model_validate(body)


def test_the_root_metadata_stays_the_mcp_one(http):
    body = http.get("/.well-known/oauth-protected-resource").json()

    assert (body["resource"], body["scopes_supported"]) == ("http://testserver/mcp", ["mcp"])


def test_the_authorization_server_lists_both_resources_and_both_scopes(http):
    body = http.get("/.well-known/oauth-authorization-server").json()

    assert body["scopes_supported"] == ["mcp", "a2a"]
    assert body["protected_resources"] == ["http://testserver/mcp", "http://testserver/a2a"]


def test_the_helpers_the_a2a_door_calls_name_the_resource_and_its_metadata():
    assert A2A_PATH == "/a2a"
    assert a2a_resource_url("https://agents.example") == "https://agents.example/a2a"
    assert a2a_metadata_url("https://agents.example") == "https://agents.example/.well-known/oauth-protected-resource/a2a"
    assert a2a_metadata_url("http://h:8000") == "http://h:8000" + METADATA_PATH + A2A_PATH
    assert resource_url("http://h") == "http://h/mcp"


# --- the flow for /a2a ---------------------------------------------------------------------------------------

def test_the_code_flow_for_a2a_issues_a_token_that_stands_for_a2a_only(http, public, owner):
    tokens = a2a_tokens(http, public, owner)

    assert tokens["scope"] == "a2a"
    row = AccessToken.objects.get(access_hash=key_digest(tokens["access_token"]))
    assert (row.resource, row.scope) == (A2A_RESOURCE, "a2a")
    grant = authenticate(tokens["access_token"], A2A_RESOURCE, "a2a")
    assert grant.user.pk == owner.pk and not grant.user.is_staff
    assert refused(tokens["access_token"], A2A_RESOURCE, "mcp").status == 403  # the audience is right, not the scope
    for scope in ("mcp", "a2a"):
        exc = refused(tokens["access_token"], RESOURCE, scope)
        assert exc.status == 401 and "another resource" in exc.detail


def test_an_mcp_token_is_refused_for_a2a(http, public, owner):
    tokens = tokens_for(http, public, owner)
    assert authenticate(tokens["access_token"], RESOURCE, "mcp").user.pk == owner.pk

    exc = refused(tokens["access_token"], A2A_RESOURCE, "a2a")

    assert exc.status == 401 and "another resource" in exc.detail


@pytest.mark.django_db(transaction=True)  # the /mcp door reads the token on its own database thread
def test_an_a2a_token_is_refused_at_the_mcp_door_and_an_mcp_token_taken(http, owner):
    client = connector(http)
    a2a = a2a_tokens(http, client, owner, host="127.0.0.1")
    assert not accepted(a2a["access_token"])

    code = code_for(http, client, owner, host="127.0.0.1", resource="http://127.0.0.1/mcp")
    mcp = exchange(http, client, code, host="127.0.0.1").json()
    assert accepted(mcp["access_token"])


@pytest.mark.parametrize(("resource", "granted"), [(A2A_RESOURCE, "a2a"), (RESOURCE, "mcp"),
                                                   ("HTTP://TESTSERVER/a2a/", "a2a")])
def test_no_scope_asks_for_the_resource_s_scope(http, public, owner, resource, granted):
    code = code_for(http, public, owner, resource=resource, scope=None)

    assert AuthorizationCode.objects.get(code_hash=key_digest(code)).scope == granted
    assert exchange(http, public, code, resource=resource).json()["scope"] == granted


@pytest.mark.parametrize(("resource", "scope"), [(A2A_RESOURCE, "mcp"), (A2A_RESOURCE, "mcp a2a"),
                                                 (RESOURCE, "a2a"), (RESOURCE, "a2a mcp")])
def test_a_scope_that_is_not_the_resource_s_is_sent_back_invalid_scope(http, public, resource, scope):
    sent_back(authorize(http, public, resource=resource, scope=scope), "invalid_scope")


@pytest.mark.parametrize("resource", ["http://testserver/a2a/some-agent", "http://testserver/a2ax",
                                      "http://testserver/a2a?x=1", "http://localhost/a2a"])
def test_an_agent_s_own_url_or_another_origin_is_not_a_resource(http, public, resource):
    """One resource for all agents: a token is for /a2a, not for /a2a/<slug>."""
    sent_back(authorize(http, public, resource=resource, scope="a2a"), "invalid_target")


@pytest.mark.parametrize(("registered", "resource"), [("mcp", A2A_RESOURCE), ("a2a", RESOURCE)])
def test_a_client_may_not_get_a_scope_it_did_not_register_for(http, registered, resource):
    client = connector(http, scope=registered)

    sent_back(authorize(http, client, resource=resource, scope=None), "invalid_scope")


def test_an_a2a_code_is_not_exchanged_for_the_mcp_resource(http, public, owner):
    code = code_for(http, public, owner, resource=A2A_RESOURCE, scope="a2a")

    oauth_error(exchange(http, public, code, resource=RESOURCE), 400, "invalid_target")
    assert exchange(http, public, code, resource=A2A_RESOURCE).status_code == 200  # the code was left usable


def test_a_refresh_keeps_the_a2a_resource_and_scope(http, public, owner):
    tokens = a2a_tokens(http, public, owner)

    oauth_error(refresh(http, public, tokens["refresh_token"], resource=RESOURCE), 400, "invalid_target")
    oauth_error(refresh(http, public, tokens["refresh_token"], resource=A2A_RESOURCE, scope="mcp"), 400,
                "invalid_scope")
    response = refresh(http, public, tokens["refresh_token"], resource=None)

    assert response.status_code == 200, response.content
    renewed = response.json()
    assert renewed["scope"] == "a2a"
    row = AccessToken.objects.get(access_hash=key_digest(renewed["access_token"]))
    assert (row.resource, row.scope) == (A2A_RESOURCE, "a2a")
    assert authenticate(renewed["access_token"], A2A_RESOURCE, "a2a").user.pk == owner.pk
    assert refused(renewed["access_token"], RESOURCE, "mcp").status == 401


# --- what the user sees --------------------------------------------------------------------------------------

@pytest.mark.parametrize("scope", ["a2a", None])
def test_the_consent_page_names_the_a2a_scope_and_resource(http, public, owner, scope):
    consent = consent_id(authorize(http, public, resource=A2A_RESOURCE, scope=scope))

    body = client_for(owner).get(f"/api/oauth/consents/{consent}").json()

    assert body["resource"] == A2A_RESOURCE
    assert [item["name"] for item in body["scope"]] == ["a2a"]
    assert "A2A" in body["scope"][0]["description"]
    assert "code" in decide(owner, consent)


def test_the_connected_apps_list_the_resources_of_an_app_s_grants(http, public, owner):
    tokens_for(http, public, owner)
    a2a_tokens(http, public, owner)
    only_a2a = connector(http, client_name="A2A client")
    a2a_tokens(http, only_a2a, owner)

    results = {app["client_id"]: app for app in client_for(owner).get("/api/oauth/apps").json()["results"]}

    assert results[public.client_id]["resources"] == [RESOURCE, A2A_RESOURCE]
    assert (results[public.client_id]["resource"], results[public.client_id]["scope"]) == (RESOURCE, "mcp")
    assert results[only_a2a.client_id]["resources"] == [A2A_RESOURCE]
    assert (results[only_a2a.client_id]["resource"], results[only_a2a.client_id]["scope"]) == (A2A_RESOURCE, "a2a")

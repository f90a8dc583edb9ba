"""Dynamic client registration (RFC 7591) at POST /oauth/register: the redirect URIs a client may register,
its authentication methods (a secret shown once, kept hashed, good at the token endpoint), the grant and
response types, the scopes (mcp, a2a), the name's limit, the per-address rate limit, and bodies that are not a
registration (always OAuth's error shape, never a 500)."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from django.test import override_settings

from oauth.models import Client
from tests.oauth.conftest import (
    REDIRECT,
    Connector,
    code_for,
    connector,
    exchange,
    oauth_error,
    register,
    tokens_for,
)

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("uri", [
    "https://claude.ai/api/mcp/auth_callback", "https://example.com:8443/cb?tenant=1", "http://127.0.0.1/cb",
    "http://127.0.0.1:6274/oauth/callback", "http://[::1]:33418/", "http://localhost:9999/callback"])
def test_https_and_loopback_http_redirect_uris_are_registered(http, uri):
    response = register(http, redirect_uris=[uri])

    assert response.status_code == 201, response.content
    assert Client.objects.get(client_id=response.json()["client_id"]).redirect_uris == [uri]


@pytest.mark.parametrize("uri", [
    "http://example.com/cb", "http://192.168.1.10/cb", "http://127.0.0.2/cb", "http://localhost.evil.com/cb",
    "https://example.com/cb#frag", "http://127.0.0.1/cb#", "ftp://127.0.0.1/cb", "javascript:alert(1)",
    "claude://callback", "/relative/cb", "https:///nohost", "", "http://[::1/cb", 42, None])
def test_other_redirect_uris_are_refused(http, uri):
    response = register(http, redirect_uris=[uri])

    oauth_error(response, 400, "invalid_redirect_uri")
    assert not Client.objects.exists()


def test_one_to_ten_redirect_uris(http):
    uris = [f"http://127.0.0.1:{9000 + n}/cb" for n in range(11)]
    assert register(http, redirect_uris=uris[:10]).status_code == 201
    assert register(http, redirect_uris=uris[:1]).status_code == 201
    oauth_error(register(http, redirect_uris=uris), 400, "invalid_redirect_uri")
    oauth_error(register(http, redirect_uris=[]), 400, "invalid_redirect_uri")
    oauth_error(register(http, redirect_uris=REDIRECT), 400, "invalid_redirect_uri")
    body = {"client_name": "no uris", "token_endpoint_auth_method": "none"}
    oauth_error(http.post("/oauth/register", body, content_type="application/json"), 400, "invalid_redirect_uri")
    assert Client.objects.count() == 2


def test_a_public_client_gets_no_secret_and_is_stored_as_registered(http):
    response = register(http, client_name="VS Code", client_uri="https://code.visualstudio.com",
                        software_id="vscode")

    assert response.status_code == 201, response.content
    assert response["Cache-Control"] == "no-store"
    body = response.json()
    assert "client_secret" not in body and body["token_endpoint_auth_method"] == "none"
    assert body["client_id"] and body["redirect_uris"] == [REDIRECT]
    row = Client.objects.get(client_id=body["client_id"])
    assert (row.name, row.auth_method, row.secret_hash, row.scope) == ("VS Code", "none", "", "mcp a2a")
    assert body["scope"] == "mcp a2a"  # no scope named: every resource's, each still consented to one by one
    assert row.grant_types == ["authorization_code", "refresh_token"] and row.response_types == ["code"]
    assert row.metadata == {"client_uri": "https://code.visualstudio.com", "software_id": "vscode"}
    assert row.registered_from == "127.0.0.1"


@pytest.mark.parametrize("method", ["client_secret_post", "client_secret_basic"])
def test_a_confidential_client_sees_its_secret_once_kept_hashed_and_it_works_at_the_token_endpoint(
        http, owner, method):
    response = register(http, token_endpoint_auth_method=method)

    assert response.status_code == 201, response.content
    secret = response.json()["client_secret"]
    row = Client.objects.get(client_id=response.json()["client_id"])
    assert row.auth_method == method and secret not in json.dumps(list(Client.objects.values()), default=str)
    assert row.secret_hash == hashlib.sha256(secret.encode()).hexdigest()
    client = Connector(row.client_id, secret, method)

    tokens = tokens_for(http, client, owner)
    assert tokens["access_token"].startswith("asa-") and tokens["refresh_token"].startswith("asr-")


def test_rfc_7591s_default_method_is_client_secret_basic(http):
    body = {"redirect_uris": [REDIRECT]}
    response = http.post("/oauth/register", body, content_type="application/json")

    assert response.status_code == 201, response.content
    assert response.json()["token_endpoint_auth_method"] == "client_secret_basic"
    assert response.json()["client_secret"].startswith("ass-")
    assert Client.objects.get().name == "Unnamed client"


@pytest.mark.parametrize("method", ["client_secret_post", "client_secret_basic"])
def test_a_wrong_or_missing_secret_is_invalid_client_401_and_burns_no_code(http, owner, method):
    client = connector(http, token_endpoint_auth_method=method)

    code = code_for(http, client, owner)
    right = client.secret
    for wrong in (right[:-1] + ("A" if right[-1] != "A" else "B"), ""):
        client.secret = wrong
        oauth_error(exchange(http, client, code), 401, "invalid_client")
    client.secret, client.method = None, "none"  # as a public client: no secret at all
    oauth_error(exchange(http, client, code), 401, "invalid_client")
    client.secret, client.method = right, method
    assert exchange(http, client, code).status_code == 200


def test_a_confidential_client_uses_the_method_it_registered(http, owner):
    basic = connector(http, token_endpoint_auth_method="client_secret_basic")

    code = code_for(http, basic, owner)
    basic.method = "client_secret_post"
    oauth_error(exchange(http, basic, code), 401, "invalid_client")
    basic.method = "client_secret_basic"
    assert exchange(http, basic, code).status_code == 200


def test_a_basic_header_for_a_public_client_is_refused(http, owner, public):

    code = code_for(http, public, owner)
    public.method, public.secret = "client_secret_basic", "anything"
    oauth_error(exchange(http, public, code), 401, "invalid_client")


@pytest.mark.parametrize("metadata", [
    {"token_endpoint_auth_method": "private_key_jwt"}, {"token_endpoint_auth_method": 3},
    {"grant_types": ["client_credentials"]}, {"grant_types": ["refresh_token"]},
    {"grant_types": ["authorization_code", "implicit"]}, {"grant_types": "authorization_code"}, {"grant_types": []},
    {"response_types": ["token"]}, {"response_types": ["code", "token"]}, {"response_types": "code"},
    {"scope": "mcp admin"}, {"scope": "a2a openid"}, {"scope": "openid"}, {"scope": ["mcp"]},
    {"client_name": "x" * 201}, {"client_name": 7}, {"client_name": ["a"]}, {"client_name": "a\ud800b"},
    {"client_name": "a\x00b"},
    {"client_uri": "https://x.example/\udfff"}])
def test_other_methods_grants_response_types_scopes_and_names_are_refused(http, metadata):
    response = register(http, **metadata)

    oauth_error(response, 400, "invalid_client_metadata")
    assert not Client.objects.exists()


@pytest.mark.parametrize(("scope", "stored"), [("mcp", "mcp"), ("a2a", "a2a"), ("a2a mcp", "mcp a2a"),
                                               ("", "mcp a2a")])
def test_a_client_is_stored_with_the_scopes_it_named(http, scope, stored):
    response = register(http, scope=scope)

    assert response.status_code == 201, response.content
    assert response.json()["scope"] == stored
    assert Client.objects.get().scope == stored


def test_the_name_may_be_200_characters_and_the_scope_mcp_or_absent(http):
    assert register(http, client_name="x" * 200).status_code == 201
    assert register(http, scope="mcp").status_code == 201
    body = {"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"}
    assert http.post("/oauth/register", body, content_type="application/json").status_code == 201
    assert register(http, grant_types=["authorization_code"]).status_code == 201
    assert Client.objects.filter(name="x" * 200).count() == 1


def test_a_client_registered_without_refresh_token_gets_no_refresh_token(http, owner):
    client = connector(http, grant_types=["authorization_code"])

    tokens = tokens_for(http, client, owner)

    assert "refresh_token" not in tokens and tokens["access_token"].startswith("asa-")


@pytest.mark.parametrize("body", [
    b"", b"null", b"[]", b'"text"', b"12", b"{", b"\xff\xfe", b'{"redirect_uris": ["http://127.0.0.1/\\ud800"]}',
    b'{"redirect_uris": [{"uri": 1}]}', b'{"redirect_uris": [["x"]]}', b'{"redirect_uris": {"a": 1}}',
    json.dumps({"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none", "client_uri": 5}).encode(),
    json.dumps({"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none", "logo_uri": "not a url"}).encode(),
    json.dumps({"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none", "contacts": "a@b"}).encode(),
    json.dumps({"redirect_uris": ["http://127.0.0.1/" + "a" * 2000]}).encode()])
def test_a_body_that_is_not_a_registration_is_400_in_oauths_shape(http, body):
    response = http.post("/oauth/register", body, content_type="application/json")

    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert response.json()["error"] in ("invalid_client_metadata", "invalid_redirect_uri"), response.json()
    assert not Client.objects.exists()


def test_a_form_body_is_refused_in_oauths_shape(http):
    response = http.post("/oauth/register", {"redirect_uris": REDIRECT})

    assert response.status_code == 400, response.content
    assert response.json()["error"] in ("invalid_client_metadata", "invalid_redirect_uri")


def test_a_registration_may_be_64_kib_and_no_more(http):
    def padded(size: int) -> bytes:
        body = {"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none", "pad": ""}
        body["pad"] = "x" * (size - len(json.dumps(body)))
        return json.dumps(body).encode()

    assert len(padded(65536)) == 65536
    assert http.post("/oauth/register", padded(65536), content_type="application/json").status_code == 201
    oauth_error(http.post("/oauth/register", padded(65537), content_type="application/json"), 400,
                "invalid_client_metadata")


def test_metadata_this_server_does_not_use_is_ignored_not_stored(http):
    response = register(http, jwks="x", jwks_uri=5, software_statement="eyJ.x.y", extra={"a": 1})

    assert response.status_code == 201, response.content
    assert not {"jwks", "jwks_uri", "software_statement", "extra"} & set(response.json())
    assert Client.objects.get().metadata == {}


def test_the_rate_limit_lets_the_20th_registration_of_a_minute_through_and_refuses_the_21st(http, settings):
    assert settings.AGENTSITE_OAUTH_REGISTER_RATE == 20
    for n in range(20):
        assert register(http, client_name=f"c{n}").status_code == 201, n

    refused = register(http, client_name="c20")

    oauth_error(refused, 429, "rate_limited")
    assert 1 <= int(refused["Retry-After"]) <= 61
    assert Client.objects.count() == 20


def test_the_rate_limit_counts_per_client_address_and_follows_its_setting(http):
    with override_settings(AGENTSITE_OAUTH_REGISTER_RATE=2):
        assert register(http).status_code == 201
        assert register(http, redirect_uris=["bad"]).status_code == 400  # a refused body counts too
        oauth_error(register(http), 429, "rate_limited")
        other = http.post("/oauth/register", {"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"},
                          content_type="application/json", REMOTE_ADDR="10.0.0.7")
        assert other.status_code == 201, other.content
    assert Client.objects.count() == 2


def test_a_secret_never_reaches_the_log(http, caplog):
    caplog.set_level("DEBUG")
    response = register(http, token_endpoint_auth_method="client_secret_post")

    secret = response.json()["client_secret"]
    assert secret not in caplog.text
    assert base64.b64encode(secret.encode()).decode() not in caplog.text

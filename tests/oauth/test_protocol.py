"""The authorization server's protocol, step by step: the authorization request (PKCE, the resource, the client
and its redirect URI, the response type, the scope, repeated parameters), the consent, the token endpoint (the
code's verifier, use, time, redirect URI, client and resource; refresh rotation, reuse detection, expiry, the
user's password and deactivation), and revocation (RFC 7009)."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlencode

import pytest
from django.utils import timezone

from accounts.authentication import key_digest
from oauth.models import AccessToken, AuthorizationCode, ConsentRequest
from tests.conftest import client_for
from tests.oauth.conftest import (
    REDIRECT,
    RESOURCE,
    authorize,
    authorize_params,
    code_for,
    connector,
    consent_id,
    decide,
    exchange,
    oauth_error,
    redirected,
    refresh,
    revoke,
    tokens_for,
)

pytestmark = pytest.mark.django_db


def sent_back(response, error: str, issuer: str = "http://testserver") -> dict[str, str]:
    """The authorization request was refused and the browser sent to the client's redirect URI with `error`, the
    request's state and this server's name (`iss`, RFC 9207: the origin the request came to)."""
    assert response.status_code == 302, (response.status_code, response.content[:300])
    location = response["Location"]
    assert location.startswith(REDIRECT + "?"), location
    query = redirected(location)
    assert query["error"] == error and query["state"] == "state-123" and query["iss"] == issuer, query
    assert not ConsentRequest.objects.exists()
    return query


def error_page(response, error: str) -> None:
    """Shown an HTML page (400), never redirected: the client or its redirect URI is not known."""
    assert response.status_code == 400, (response.status_code, response.get("Location"))
    assert response["Content-Type"].startswith("text/html")
    assert "Location" not in response
    assert f'<code id="error">{error}</code>' in response.content.decode()
    assert not ConsentRequest.objects.exists()


# --- the authorization request ------------------------------------------------------------------------------

def test_a_good_request_goes_to_the_consent_page_and_is_kept_for_any_process(http, public):
    response = authorize(http, public)

    consent = ConsentRequest.objects.get(pk=consent_id(response))
    assert response["Cache-Control"] == "no-store"
    assert consent.params["resource"] == RESOURCE and consent.params["code_challenge_method"] == "S256"
    assert timedelta(minutes=9) < consent.expires_at - timezone.now() <= timedelta(minutes=10)


@pytest.mark.parametrize("overrides", [
    {"code_challenge": None, "code_challenge_method": None}, {"code_challenge": None},
    {"code_challenge_method": None}, {"code_challenge_method": "plain"}, {"code_challenge_method": "S512"},
    {"code_challenge": "short"}, {"code_challenge": "x" * 129}, {"code_challenge": "!" * 43},
    {"code_challenge": ["a" * 43, "b" * 43]}, {"code_challenge_method": ["S256", "S256"]}])
def test_pkce_s256_is_required_else_invalid_request_sent_back_with_the_state(http, public, overrides):
    sent_back(authorize(http, public, **overrides), "invalid_request")


def test_a_challenge_of_43_and_of_128_characters_is_taken(http, public):
    for challenge in ("a" * 43, "b" * 128):
        assert consent_id(authorize(http, public, code_challenge=challenge))


@pytest.mark.parametrize("resource", [
    None, "", "http://testserver/mcp/sse", "http://testserver/", "http://testserver", "https://testserver/mcp",
    "http://localhost/mcp", "http://testserver/mcp?x=1", "http://testserver/mcp#f", "http://testserver:8000/mcp",
    "http://testserver/MCPX", ["http://testserver/mcp", "http://testserver/mcp"],
    ["http://testserver/mcp", "http://localhost/mcp"]])
def test_the_resource_must_be_exactly_one_and_this_servers_mcp_url_else_invalid_target(http, public, resource):
    sent_back(authorize(http, public, resource=resource), "invalid_target")


def test_the_resource_may_have_a_trailing_slash_and_other_case_in_scheme_and_host(http, public):
    for resource in ("http://testserver/mcp/", "HTTP://TestServer/mcp"):
        assert consent_id(authorize(http, public, resource=resource))


def test_the_resource_is_the_origin_the_request_was_made_to(http, public):
    """On another of the server's names (ALLOWED_HOSTS) the resource is that name's /mcp."""
    sent_back(authorize(http, public, host="localhost"), "invalid_target", issuer="http://localhost")
    assert consent_id(authorize(http, public, host="localhost", resource="http://localhost/mcp"))


@pytest.mark.parametrize("overrides", [
    {"client_id": "no-such-client"}, {"client_id": None}, {"client_id": ["a", "b"]},
    {"redirect_uri": "http://127.0.0.1:33418/other"}, {"redirect_uri": REDIRECT + "/"},
    {"redirect_uri": REDIRECT + "?x=1"}, {"redirect_uri": "https://evil.example/callback"},
    {"redirect_uri": [REDIRECT, REDIRECT]}])
def test_an_unknown_client_or_unregistered_redirect_uri_gets_an_error_page_never_a_redirect(http, public, overrides):
    response = authorize(http, public, **overrides)

    assert response.status_code == 400 and "Location" not in response


def test_the_error_pages_name_the_error(http, public):
    error_page(authorize(http, public, client_id="no-such-client"), "invalid_client")
    error_page(authorize(http, public, redirect_uri="https://evil.example/cb"), "invalid_request")


def test_a_request_without_a_redirect_uri_uses_the_one_registered_and_none_when_there_are_two(http, owner):
    single = connector(http)
    consent = consent_id(authorize(http, single, redirect_uri=None))
    assert "code" in decide(owner, consent)

    double = connector(http, redirect_uris=[REDIRECT, "http://127.0.0.1:1/cb"])
    error_page(authorize(http, double, redirect_uri=None), "invalid_request")


@pytest.mark.parametrize("response_type", ["token", "code token", "id_token", None])
def test_a_response_type_other_than_code_is_sent_back_unsupported(http, public, response_type):
    sent_back(authorize(http, public, response_type=response_type), "unsupported_response_type")


@pytest.mark.parametrize("scope", ["admin", "mcp admin", "openid"])
def test_a_scope_other_than_mcp_is_invalid_scope(http, public, scope):
    sent_back(authorize(http, public, scope=scope), "invalid_scope")


def test_no_scope_asks_for_mcp(http, public, owner):
    consent = consent_id(authorize(http, public, scope=None))
    code = decide(owner, consent)["code"]
    assert AuthorizationCode.objects.get(code_hash=key_digest(code)).scope == "mcp"


@pytest.mark.parametrize("name", ["response_type", "scope", "state"])
def test_a_repeated_parameter_is_refused(http, public, name):
    """RFC 6749 §3.1: parameters are sent once. Authlib refuses a repeated response_type, scope or state
    (before the client is known: an error page), ours a repeated PKCE parameter or resource (sent back)."""
    value = authorize_params(public)[name]
    response = authorize(http, public, **{name: [value, value]})

    error_page(response, "invalid_request")


def test_a_repeated_parameter_unknown_to_the_protocol_is_ignored_and_not_kept(http, public):
    consent = consent_id(authorize(http, public, prompt=["consent", "login"], extra="\x00"))
    assert set(ConsentRequest.objects.get(pk=consent).params) == {
        "response_type", "client_id", "redirect_uri", "scope", "state", "code_challenge", "code_challenge_method",
        "resource"}


def test_a_nul_in_the_state_is_sent_back_invalid_request_not_stored(http, public):
    response = authorize(http, public, state="a\x00b")

    assert response.status_code == 302 and redirected(response["Location"])["error"] == "invalid_request"
    assert not ConsentRequest.objects.exists()


def test_a_nul_in_a_client_id_is_an_unknown_client_everywhere(http, public, owner):
    """PostgreSQL refuses a NUL in a query: it must never reach one."""
    error_page(authorize(http, public, client_id="x\x00y"), "invalid_client")
    tokens = tokens_for(http, public, owner)
    public.client_id = public.client_id + "\x00"
    oauth_error(refresh(http, public, tokens["refresh_token"]), 400, "invalid_client")
    oauth_error(revoke(http, public, tokens["access_token"]), 400, "invalid_client")
    public.method, public.secret = "client_secret_basic", "s"
    oauth_error(revoke(http, public, tokens["access_token"]), 401, "invalid_client")


# --- the consent --------------------------------------------------------------------------------------------

def test_a_refusal_sends_access_denied_with_the_state_and_no_code(http, public, owner):
    query = decide(owner, consent_id(authorize(http, public)), allow=False)

    assert (query["error"], query["state"]) == ("access_denied", "state-123") and "code" not in query, query
    assert not AuthorizationCode.objects.exists()


def test_a_consent_is_decided_once(http, public, owner):
    consent = consent_id(authorize(http, public))
    assert "code" in decide(owner, consent)

    again = client_for(owner).post(f"/api/oauth/consents/{consent}", {"allow": True}, format="json")
    assert again.status_code == 404 and AuthorizationCode.objects.count() == 1


def test_a_consent_past_its_time_is_gone(http, public, owner):
    consent = consent_id(authorize(http, public))
    ConsentRequest.objects.update(expires_at=timezone.now() - timedelta(seconds=1))

    response = client_for(owner).post(f"/api/oauth/consents/{consent}", {"allow": True}, format="json")
    assert response.status_code == 404 and not AuthorizationCode.objects.exists()


def test_a_consent_decided_through_another_name_of_the_server_keeps_the_requests_resource(http, public, owner):
    """The decision's request may reach the server by another allowed host than the authorization request:
    the code is for the resource the request named, not the decision's host."""
    consent = consent_id(authorize(http, public))
    code = decide(owner, consent, host="localhost")["code"]

    assert AuthorizationCode.objects.get(code_hash=key_digest(code)).resource == RESOURCE
    assert exchange(http, public, code).status_code == 200


def test_a_code_is_bound_to_the_user_who_allowed(http, public, owner, other_user):
    tokens = tokens_for(http, public, other_user)

    assert AccessToken.objects.get(access_hash=key_digest(tokens["access_token"])).user == other_user


# --- the token endpoint: codes -------------------------------------------------------------------------------

def test_the_code_exchange_answers_a_bearer_token_for_an_hour_with_its_refresh_token(http, public, owner):
    response = exchange(http, public, code_for(http, public, owner))

    assert response.status_code == 200, response.content
    assert response["Cache-Control"] == "no-store"
    body = response.json()
    assert (body["token_type"], body["expires_in"], body["scope"]) == ("Bearer", 3600, "mcp")
    row = AccessToken.objects.get()
    assert row.access_hash == key_digest(body["access_token"]) and row.refresh_hash == key_digest(body["refresh_token"])
    assert row.resource == RESOURCE and row.client.client_id == public.client_id
    assert timedelta(days=29) < row.refresh_expires_at - timezone.now() <= timedelta(days=30)


@pytest.mark.parametrize("verifier", [None, "", "a" * 43, "a" * 42, "a" * 129, "!" * 50])
def test_a_missing_or_wrong_verifier_is_refused_and_the_code_stays_for_the_right_one(http, public, owner, verifier):
    code = code_for(http, public, owner)

    refused = exchange(http, public, code, code_verifier=verifier)

    assert refused.status_code == 400 and refused.json()["error"] in ("invalid_request", "invalid_grant"), \
        refused.content
    assert not AccessToken.objects.exists()
    assert exchange(http, public, code).status_code == 200


def test_a_code_used_twice_is_refused_and_revokes_the_tokens_of_its_first_use(http, public, owner):
    code = code_for(http, public, owner)
    first = exchange(http, public, code).json()
    refreshed = refresh(http, public, first["refresh_token"]).json()

    oauth_error(exchange(http, public, code), 400, "invalid_grant")

    assert AccessToken.objects.count() == 2
    assert not AccessToken.objects.filter(revoked_at__isnull=True).exists()
    oauth_error(refresh(http, public, refreshed["refresh_token"]), 400, "invalid_grant")


def test_a_code_lives_one_minute(http, public, owner):
    code = code_for(http, public, owner)
    row = AuthorizationCode.objects.get()
    assert timedelta(seconds=50) < row.expires_at - timezone.now() <= timedelta(minutes=1)

    AuthorizationCode.objects.update(expires_at=timezone.now() + timedelta(seconds=5))
    assert exchange(http, public, code).status_code == 200

    late = code_for(http, public, owner)
    AuthorizationCode.objects.filter(used_at__isnull=True).update(expires_at=timezone.now())
    oauth_error(exchange(http, public, late), 400, "invalid_grant")


@pytest.mark.parametrize("redirect_uri", [None, "http://127.0.0.1:33418/other", REDIRECT + "/"])
def test_the_redirect_uri_must_be_the_authorization_requests(http, public, owner, redirect_uri):
    code = code_for(http, public, owner)

    oauth_error(exchange(http, public, code, redirect_uri=redirect_uri), 400, "invalid_grant")
    assert exchange(http, public, code).status_code == 200


def test_another_clients_code_is_refused_and_left_to_its_client(http, public, owner):
    thief = connector(http, redirect_uris=[REDIRECT])
    code = code_for(http, public, owner)
    thief.verifier = public.verifier

    oauth_error(exchange(http, thief, code), 400, "invalid_grant")
    assert exchange(http, public, code).status_code == 200


def test_a_resource_written_otherwise_is_stored_and_compared_as_one(http, public, owner):
    code = code_for(http, public, owner, resource="HTTP://TestServer/mcp/")
    assert AuthorizationCode.objects.get().resource == RESOURCE

    tokens = exchange(http, public, code, resource="http://TESTSERVER/mcp").json()

    assert AccessToken.objects.get().resource == RESOURCE
    assert refresh(http, public, tokens["refresh_token"], resource="http://testserver/mcp/").status_code == 200


@pytest.mark.parametrize("resource", ["http://localhost/mcp", "http://testserver/mcp/sse", "http://testserver/other",
                                      "https://testserver/mcp"])
def test_a_resource_other_than_the_codes_is_invalid_target_at_the_token_endpoint(http, public, owner, resource):
    code = code_for(http, public, owner)

    oauth_error(exchange(http, public, code, resource=resource), 400, "invalid_target")
    assert exchange(http, public, code).status_code == 200
    assert exchange(http, public, code_for(http, public, owner), resource=None).status_code == 200


def test_a_deactivated_users_code_is_refused(http, public, owner):
    code = code_for(http, public, owner)
    owner.is_active = False
    owner.save()

    oauth_error(exchange(http, public, code), 400, "invalid_grant")


def test_a_code_from_before_the_users_password_changed_is_refused(http, public, owner):
    code = code_for(http, public, owner)
    owner.set_password("a-new-correct-horse-77")
    owner.save()

    oauth_error(exchange(http, public, code), 400, "invalid_grant")
    assert not AccessToken.objects.exists()


@pytest.mark.parametrize("form", [
    {}, {"grant_type": "authorization_code"}, {"grant_type": "password", "username": "a", "password": "b"},
    {"grant_type": "client_credentials"}, {"grant_type": "authorization_code", "code": "asc-x"},
    {"grant_type": "refresh_token"}, {"grant_type": "refresh_token", "refresh_token": "asr-x"}])
def test_a_bad_token_request_is_answered_in_oauths_shape(http, public, form):
    response = http.post("/oauth/token", urlencode({**form, "client_id": public.client_id}),
                         content_type="application/x-www-form-urlencoded")

    assert response.status_code in (400, 401), response.content
    assert response.json()["error"] in ("invalid_request", "invalid_grant", "unsupported_grant_type",
                                        "unauthorized_client", "invalid_client"), response.json()


@pytest.mark.parametrize("body,content_type", [
    (b'{"grant_type": "authorization_code"}', "application/json"),
    (b"\xff\xfe=\xff", "application/x-www-form-urlencoded"),
    (b"grant_type=refresh_token&refresh_token=%ED%A0%80", "application/x-www-form-urlencoded"), (b"", "text/plain")])
def test_a_token_request_that_is_not_a_form_is_never_a_500(http, body, content_type):
    response = http.post("/oauth/token", body, content_type=content_type)

    assert 400 <= response.status_code < 500, (response.status_code, response.content[:300])
    assert isinstance(response.json()["error"], str)


def test_a_get_to_the_token_endpoint_is_refused(http):
    assert http.get("/oauth/token").status_code == 405


# --- the token endpoint: refresh ---------------------------------------------------------------------------

def test_each_refresh_rotates_both_tokens_and_the_used_refresh_token_is_refused(http, public, owner):
    first = tokens_for(http, public, owner)

    second = refresh(http, public, first["refresh_token"])
    assert second.status_code == 200, second.content
    second = second.json()
    third = refresh(http, public, second["refresh_token"]).json()

    tokens = {first["refresh_token"], second["refresh_token"], third["refresh_token"]}
    assert len(tokens) == 3 and len({first["access_token"], second["access_token"], third["access_token"]}) == 3
    old = AccessToken.objects.get(access_hash=key_digest(first["access_token"]))
    assert old.rotated_at is not None and old.revoked_at is not None  # the old access token ends with it
    assert AccessToken.objects.filter(revoked_at__isnull=True).count() == 1
    assert len(set(AccessToken.objects.values_list("family", flat=True))) == 1


def test_a_rotated_refresh_token_presented_again_revokes_the_whole_family(http, public, owner):
    first = tokens_for(http, public, owner)
    second = refresh(http, public, first["refresh_token"]).json()

    oauth_error(refresh(http, public, first["refresh_token"]), 400, "invalid_grant")

    newest = AccessToken.objects.get(access_hash=key_digest(second["access_token"]))
    assert newest.revoked_at is not None
    oauth_error(refresh(http, public, second["refresh_token"]), 400, "invalid_grant")


def test_another_family_survives_a_reuse(http, public, owner):
    first = tokens_for(http, public, owner)
    other = tokens_for(http, public, owner)
    refresh(http, public, first["refresh_token"])
    refresh(http, public, first["refresh_token"])

    assert refresh(http, public, other["refresh_token"]).status_code == 200


def test_another_clients_refresh_token_is_refused_and_left_to_its_client(http, public, owner):
    tokens = tokens_for(http, public, owner)
    thief = connector(http)

    oauth_error(refresh(http, thief, tokens["refresh_token"]), 400, "invalid_grant")
    assert refresh(http, public, tokens["refresh_token"]).status_code == 200


def test_a_refresh_refused_for_its_resource_or_scope_leaves_the_refresh_token_usable(http, public, owner):
    tokens = tokens_for(http, public, owner)

    oauth_error(refresh(http, public, tokens["refresh_token"], resource="http://localhost/mcp"), 400,
                "invalid_target")
    oauth_error(refresh(http, public, tokens["refresh_token"], scope="mcp admin"), 400, "invalid_scope")
    assert refresh(http, public, tokens["refresh_token"], scope="mcp").status_code == 200


def test_a_refresh_token_lives_thirty_days(http, public, owner):
    tokens = tokens_for(http, public, owner)
    AccessToken.objects.update(refresh_expires_at=timezone.now() + timedelta(seconds=5))
    fresh = refresh(http, public, tokens["refresh_token"]).json()

    AccessToken.objects.filter(access_hash=key_digest(fresh["access_token"])).update(
        refresh_expires_at=timezone.now())
    oauth_error(refresh(http, public, fresh["refresh_token"]), 400, "invalid_grant")


def test_a_refresh_after_the_users_password_changed_is_refused_and_ends_the_grant(http, public, owner):
    tokens = tokens_for(http, public, owner)
    owner.set_password("a-new-correct-horse-77")
    owner.save()

    oauth_error(refresh(http, public, tokens["refresh_token"]), 400, "invalid_grant")
    assert AccessToken.objects.get().revoked_at is not None


def test_a_refresh_after_the_users_deactivation_is_refused(http, public, owner):
    tokens = tokens_for(http, public, owner)
    owner.is_active = False
    owner.save()

    oauth_error(refresh(http, public, tokens["refresh_token"]), 400, "invalid_grant")
    assert AccessToken.objects.get().revoked_at is not None


def test_a_revoked_grants_refresh_token_is_refused(http, public, owner):
    tokens = tokens_for(http, public, owner)
    assert revoke(http, public, tokens["access_token"]).status_code == 200

    oauth_error(refresh(http, public, tokens["refresh_token"]), 400, "invalid_grant")


def test_a_confidential_clients_refresh_needs_its_secret(http, owner):
    client = connector(http, token_endpoint_auth_method="client_secret_post")
    tokens = tokens_for(http, client, owner)
    secret, client.secret = client.secret, "ass-wrong"

    oauth_error(refresh(http, client, tokens["refresh_token"]), 401, "invalid_client")
    client.secret = secret
    assert refresh(http, client, tokens["refresh_token"]).status_code == 200


# --- revocation (RFC 7009) ---------------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["access_token", "refresh_token"])
def test_revoking_either_token_ends_the_whole_grant(http, public, owner, which):
    first = tokens_for(http, public, owner)
    second = refresh(http, public, first["refresh_token"]).json()

    response = revoke(http, public, second[which], token_type_hint=which)

    assert response.status_code == 200 and response.json() == {}
    assert not AccessToken.objects.filter(revoked_at__isnull=True).exists()
    oauth_error(refresh(http, public, second["refresh_token"]), 400, "invalid_grant")


def test_revoking_an_unknown_or_already_revoked_token_is_200(http, public, owner):
    assert revoke(http, public, "asa-unknown").status_code == 200
    tokens = tokens_for(http, public, owner)
    assert revoke(http, public, tokens["refresh_token"]).status_code == 200
    assert revoke(http, public, tokens["refresh_token"]).status_code == 200


def test_another_client_cannot_revoke_a_token(http, public, owner):
    tokens = tokens_for(http, public, owner)
    other = connector(http)

    response = revoke(http, other, tokens["access_token"])

    assert response.status_code == 400 and response.json()["error"] == "invalid_grant"
    assert AccessToken.objects.get().revoked_at is None
    assert refresh(http, public, tokens["refresh_token"]).status_code == 200


def test_revocation_needs_the_clients_authentication(http, owner):
    client = connector(http, token_endpoint_auth_method="client_secret_basic")
    tokens = tokens_for(http, client, owner)
    client.secret = "ass-wrong"

    oauth_error(revoke(http, client, tokens["access_token"]), 401, "invalid_client")
    assert AccessToken.objects.get().revoked_at is None


def test_a_revocation_without_a_token_is_refused(http, public):
    oauth_error(http.post("/oauth/revoke", urlencode({"client_id": public.client_id}),
                          content_type="application/x-www-form-urlencoded"), 400, "invalid_request")


@pytest.mark.parametrize("hint", ["id_token", "refresh_token", "access_token", ""])
def test_the_hint_is_only_a_hint_an_unknown_or_wrong_one_is_ignored(http, public, owner, hint):
    """RFC 7009 §2.1: an invalid hint does not influence the answer; the token is found whatever it says."""
    tokens = tokens_for(http, public, owner)

    assert revoke(http, public, tokens["access_token"], token_type_hint=hint).status_code == 200
    assert AccessToken.objects.get().revoked_at is not None

"""What the protocol endpoints refuse around Authlib: values its errors cannot echo (RFC 6749 Appendix A: printable
ASCII but " and \\), parameters over 2000 characters, Basic credentials that do not decode, a registration that
is not JSON, and authorization requests past the per-address rate. Each is a clear 4xx, never a 500, and stores
nothing."""

from __future__ import annotations

import base64

import pytest
from django.test import override_settings

from oauth.models import ConsentRequest
from oauth.views import MAX_PARAMETER_CHARS
from tests.oauth.conftest import authorize, authorize_params, connector, consent_id, oauth_error, tokens_for

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("overrides", [
    {"response_type": '"'}, {"response_type": "\u00e9"}, {"redirect_uri": "https://a.example/\u00e9"},
    {"state": "x" * (MAX_PARAMETER_CHARS + 1)}, {"client_id": "\u00e9"}],
    ids=["quote-in-type", "non-ascii-type", "non-ascii-redirect", "state-one-past-the-limit", "non-ascii-client"])
def test_an_authorization_request_with_a_parameter_that_is_not_oauths_shows_the_error_page(http, overrides):
    client = connector(http)
    response = authorize(http, client, **overrides)
    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("text/html") and b'<code id="error">invalid_' in response.content
    assert ConsentRequest.objects.count() == 0


def test_a_resource_authlib_cannot_echo_is_sent_back_to_the_client_or_shown_never_a_500(http):
    client = connector(http)
    response = authorize(http, client, resource="http://testserver/\u00e9")
    assert response.status_code in (302, 400), response.content[:300]
    assert ConsentRequest.objects.count() == 0


@pytest.mark.parametrize("state", ["s" * MAX_PARAMETER_CHARS, 'a"b\\c ~'], ids=["at-the-limit", "quote-backslash"])
def test_a_state_of_printable_ascii_up_to_the_limit_is_kept(http, owner, state):
    client = connector(http)
    assert consent_id(authorize(http, client, state=state))


@pytest.mark.parametrize("path", ["/oauth/token", "/oauth/revoke"])
def test_a_quote_that_authlib_would_echo_in_its_error_is_invalid_request(http, path):
    response = http.post(path, 'grant_type=a"b&token=x', content_type="application/x-www-form-urlencoded")
    assert response.status_code in (400, 401), response.content
    assert isinstance(response.json()["error"], str)


@pytest.mark.parametrize("path", ["/oauth/token", "/oauth/revoke"])
@pytest.mark.parametrize("form", ["grant_type=refresh_token&refresh_token=%C3%A9&token=%C3%A9&client_id=%C3%A9",
                                  "grant_type=%C3%A9&token_type_hint=%C3%A9&token=x",
                                  "grant_type=refresh_token&refresh_token=a%22b&token=a%00b"])
def test_a_token_or_revocation_request_with_values_authlib_cannot_echo_is_a_4xx_not_a_500(http, path, form):
    response = http.post(path, form, content_type="application/x-www-form-urlencoded")
    assert response.status_code in (400, 401), response.content[:300]
    assert isinstance(response.json()["error"], str)


@pytest.mark.parametrize("path", ["/oauth/token", "/oauth/revoke"])
def test_a_parameter_one_past_the_limit_is_invalid_request(http, path):
    response = http.post(path, "token=" + "x" * (MAX_PARAMETER_CHARS + 1),
                         content_type="application/x-www-form-urlencoded")
    oauth_error(response, 400, "invalid_request")


@pytest.mark.parametrize("path", ["/oauth/token", "/oauth/revoke"])
@pytest.mark.parametrize("credentials", ["/w==", "not base64!", base64.b64encode(b"no-colon").decode(),
                                         base64.b64encode("caf\u00e9:x".encode()).decode()])
def test_basic_credentials_that_do_not_decode_are_invalid_client(http, path, credentials):
    response = http.post(path, "grant_type=refresh_token&refresh_token=x&token=x",
                         content_type="application/x-www-form-urlencoded", HTTP_AUTHORIZATION=f"Basic {credentials}")
    oauth_error(response, 401, "invalid_client")


def test_well_formed_basic_credentials_still_reach_the_protocol(http, owner):
    client = connector(http, token_endpoint_auth_method="client_secret_basic")
    assert tokens_for(http, client, owner)["access_token"].startswith("asa-")


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", ""])
def test_a_registration_that_is_not_json_is_refused(http, content_type):
    response = http.post("/oauth/register", '{"redirect_uris": ["https://a.example/cb"]}', content_type=content_type)
    oauth_error(response, 400, "invalid_client_metadata")


@override_settings(AGENTSITE_OAUTH_AUTHORIZE_RATE=3)
def test_authorization_requests_past_the_rate_get_a_429_page_and_keep_nothing(http):
    client = connector(http)
    for _ in range(3):
        consent_id(authorize(http, client))
    response = authorize(http, client)
    assert response.status_code == 429 and int(response["Retry-After"]) >= 1
    assert response["Content-Type"].startswith("text/html") and b"rate_limited" in response.content
    assert ConsentRequest.objects.count() == 3
    assert authorize_params(client)  # (the helper itself is unchanged)

"""GET and POST /api/oauth/consents/:id: the dashboard's consent page reads what an app asks for, and the signed-in
user decides once. Any signed-in user may decide: the code is bound to whoever decides (the page shows the app
and where it sends the browser, so a user who did not start the request can refuse it). An API key may read a
consent but never decide one."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import AuditEvent
from accounts.services import key_create
from oauth.models import AccessToken, AuthorizationCode, ConsentRequest
from tests.conftest import client_for
from tests.oauth.test_lifecycle import REDIRECT, RESOURCE, consent_for, register

pytestmark = pytest.mark.django_db


@pytest.fixture
def consent() -> tuple[str, str]:
    """(consent id, client id) of an authorization request waiting for a decision."""
    client_id = register("Claude")
    consent_id, _verifier = consent_for(client_id)
    return consent_id, client_id


def _decide(user, consent_id: str, body, **kwargs):
    return client_for(user).post(f"/api/oauth/consents/{consent_id}", body, format="json", **kwargs)


def _query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(url).query)


def test_the_consent_page_reads_the_app_its_redirect_host_the_scope_and_the_resource(owner, consent):
    consent_id, client_id = consent
    answer = client_for(owner).get(f"/api/oauth/consents/{consent_id}")
    assert answer.status_code == 200
    body = answer.json()
    assert body["id"] == consent_id and body["resource"] == RESOURCE
    assert body["client"] == {"client_id": client_id, "name": "Claude", "client_uri": "",
                              "redirect_host": "127.0.0.1:9"}
    assert [scope["name"] for scope in body["scope"]] == ["mcp"] and body["scope"][0]["description"]
    assert "expires_at" in body


def test_allowing_sends_the_browser_back_with_a_code_bound_to_the_user_who_decided(owner, consent):
    consent_id, client_id = consent
    answer = _decide(owner, consent_id, {"allow": True})
    assert answer.status_code == 200, answer.content
    location = answer.json()["redirect_to"]
    assert location.startswith(REDIRECT + "?")
    assert _query(location)["state"] == ["st"] and _query(location)["code"][0].startswith("asc-")
    assert _query(location)["iss"] == ["http://testserver"]  # RFC 9207: the server names itself
    code = AuthorizationCode.objects.get()
    assert code.user_id == owner.pk and code.client.client_id == client_id and code.resource == RESOURCE
    event = AuditEvent.objects.get(action="oauth.consent")
    assert event.outcome == "success" and event.actor_name == "owner"


def test_refusing_sends_the_browser_back_with_access_denied_and_issues_nothing(owner, consent):
    consent_id, _client_id = consent
    answer = _decide(owner, consent_id, {"allow": False})
    assert answer.status_code == 200, answer.content
    query = _query(answer.json()["redirect_to"])
    assert query["error"] == ["access_denied"] and query["state"] == ["st"] and "code" not in query
    assert query["iss"] == ["http://testserver"]
    assert not AuthorizationCode.objects.exists() and not AccessToken.objects.exists()
    assert AuditEvent.objects.get(action="oauth.consent").outcome == "refused"


@pytest.mark.parametrize("first", [True, False])
def test_a_consent_is_decided_once(owner, other_user, consent, first):
    consent_id, _ = consent
    assert _decide(owner, consent_id, {"allow": first}).status_code == 200
    for user, allow in ((owner, True), (other_user, False)):
        again = _decide(user, consent_id, {"allow": allow})
        assert again.status_code == 404 and again.json()["error"]["code"] == "not_found"
    assert client_for(owner).get(f"/api/oauth/consents/{consent_id}").status_code == 404
    assert AuthorizationCode.objects.count() == (1 if first else 0)


def test_an_expired_consent_is_404_to_read_and_to_decide_and_one_still_live_is_not(owner, consent):
    consent_id, _ = consent
    ConsentRequest.objects.filter(pk=consent_id).update(expires_at=timezone.now() + timedelta(seconds=30))
    assert client_for(owner).get(f"/api/oauth/consents/{consent_id}").status_code == 200
    ConsentRequest.objects.filter(pk=consent_id).update(expires_at=timezone.now())
    assert client_for(owner).get(f"/api/oauth/consents/{consent_id}").status_code == 404
    answer = _decide(owner, consent_id, {"allow": True})
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"
    assert not AuthorizationCode.objects.exists()


def test_an_unknown_consent_is_404(owner):
    assert client_for(owner).get("/api/oauth/consents/nope").status_code == 404
    answer = _decide(owner, "nope", {"allow": True})
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize("body", [{}, {"allow": "yes"}, {"allow": 1}, {"allow": None}, {"allow": [True]},
                                  {"allow": True, "user": 1}, [], "allow", 7, None])
def test_a_bad_decision_is_a_400_in_the_envelope_and_leaves_the_consent_to_decide(owner, consent, body):
    consent_id, _ = consent
    answer = _decide(owner, consent_id, body)
    assert answer.status_code == 400, answer.content
    assert answer.json()["error"]["code"] in ("invalid", "unknown_field")
    assert _decide(owner, consent_id, {"allow": True}).status_code == 200


@pytest.mark.parametrize(("raw", "content_type"), [(b"{", "application/json"), (b"allow=true", "text/plain"),
                                                   (b"\xff\xfe", "application/json"), (b"[" * 200 + b"]" * 200,
                                                                                       "application/json")])
def test_a_body_that_is_not_json_is_refused_in_the_envelope_not_a_500(owner, consent, raw, content_type):
    consent_id, _ = consent
    answer = client_for(owner).generic("POST", f"/api/oauth/consents/{consent_id}", raw, content_type=content_type)
    assert answer.status_code in (400, 415), answer.content
    assert set(answer.json()["error"]) >= {"code", "message"}
    assert _decide(owner, consent_id, {"allow": True}).status_code == 200


def test_an_api_key_may_read_a_consent_but_not_decide_it(owner, consent):
    consent_id, _ = consent
    _, secret = key_create(user=owner, name="script", scopes=["api"])
    key = APIClient()
    key.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert key.get(f"/api/oauth/consents/{consent_id}").status_code == 200
    answer = key.post(f"/api/oauth/consents/{consent_id}", {"allow": True}, format="json")
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "forbidden"
    assert not AuthorizationCode.objects.exists()
    assert _decide(owner, consent_id, {"allow": True}).status_code == 200  # still there to decide


def test_no_one_signed_out_reads_or_decides_a_consent(consent):
    consent_id, _ = consent
    assert APIClient().get(f"/api/oauth/consents/{consent_id}").status_code == 401
    assert APIClient().post(f"/api/oauth/consents/{consent_id}", {"allow": True}, format="json").status_code == 401
    assert ConsentRequest.objects.filter(pk=consent_id).exists()


def test_whoever_signed_in_decides_gets_the_grant_not_who_started_the_request(other_user, consent):
    consent_id, _ = consent
    assert _decide(other_user, consent_id, {"allow": True}).status_code == 200
    assert AuthorizationCode.objects.get().user_id == other_user.pk

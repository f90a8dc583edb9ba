"""Single sign-on as an attacker sees it (fast tier: the database, the views, a stand-in for the provider's half):
another origin of the same site using up a sign-in's ticket, the CORS answer to a credentialed read, the cookies'
attributes over http and behind an https proxy, a callback's query never reflected or audited, a userinfo answer
about someone else, a username that reads like an existing one, and admin or allowed groups never matched after
normalisation. The round trip against the real provider is tests/sso."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from accounts.models import AuditEvent
from sso import views
from sso.models import Identity, LoginAttempt, SsoSession, Ticket
from sso.provider import SsoFailure
from tests.conftest import client_for

pytestmark = pytest.mark.django_db

User = get_user_model()
ISSUER = "https://idp.example.com"
BROWSER = "b" * 43
SESSION = "/api/auth/oidc/session"
CALLBACK = "/api/auth/oidc/callback"


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def ticket(user: Any) -> str:
    value = secrets.token_urlsafe(32)
    session = SsoSession.objects.create(key=secrets.token_urlsafe(24), user=user, issuer=ISSUER, id_token="x.y.z")
    Ticket.objects.create(hash=digest(value), user=user, session=session)
    return value


def collect(client: Any, value: str, **headers: str) -> Any:
    client.cookies[views.TICKET_COOKIE] = value
    return client.post(SESSION, **headers)


# --- the ticket and other origins --------------------------------------------------------------------------------

@pytest.mark.parametrize("origin", ["http://localhost:9999", "http://127.0.0.1:5173", "null",
                                    "http://testserver.attacker.example", "https://sub.testserver"])
def test_another_origin_cannot_use_up_a_sign_ins_ticket(anon_client, owner, origin):
    """SameSite=Lax sends the cookie from any origin of the same site (another port of localhost, a sibling
    subdomain): the ticket must be refused to them before it is looked at, and still be there for the dashboard."""
    value = ticket(owner)
    refused = collect(anon_client, value, HTTP_ORIGIN=origin)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert Ticket.objects.filter(hash=digest(value)).exists()
    answer = collect(anon_client, value, HTTP_ORIGIN="http://testserver")
    assert answer.status_code == 200 and answer.json()["user"]["username"] == owner.username


def test_a_request_without_an_origin_collects_as_before(anon_client, owner):
    assert collect(anon_client, ticket(owner)).status_code == 200


def test_behind_a_proxy_the_redirect_uris_origin_is_the_servers(anon_client, owner, settings):
    """The proxy may name the upstream as the Host; the browser's Origin is the public one of REDIRECT_URI."""
    settings.ALLOWED_HOSTS = ["127.0.0.1"]
    settings.OIDC = {**settings.OIDC, "REDIRECT_URI": "https://agentsite.example.com/api/auth/oidc/callback"}
    value = ticket(owner)
    assert collect(anon_client, value, HTTP_ORIGIN="https://evil.example.com", HTTP_HOST="127.0.0.1"
                   ).status_code == 403
    assert collect(anon_client, value, HTTP_ORIGIN="https://agentsite.example.com", HTTP_HOST="127.0.0.1"
                   ).status_code == 200


def test_no_origin_is_allowed_a_credentialed_read_of_the_tokens(anon_client, owner):
    """CORS lets any localhost port read the API with a bearer token; a read carrying cookies is another thing:
    without Access-Control-Allow-Credentials no page of another origin reads what a cookie buys."""
    for origin in ("http://localhost:9999", "http://testserver"):
        preflight = anon_client.options(SESSION, HTTP_ORIGIN=origin, HTTP_ACCESS_CONTROL_REQUEST_METHOD="POST")
        answer = collect(anon_client, ticket(owner), HTTP_ORIGIN=origin)
        for response in (preflight, answer):
            assert "Access-Control-Allow-Credentials" not in response, (origin, dict(response.headers))


# --- a stand-in for the provider's half, to drive the views ------------------------------------------------------

class FakeProvider:
    """What sso.provider.Provider answers, without a provider: the ID token's claims and userinfo as set."""

    issuer = ISSUER

    def __init__(self, claims: dict[str, Any], info: dict[str, Any] | None = None) -> None:
        self.claims, self.info = claims, info or {}

    def authorization_url(self, *, redirect_uri: str, state: str, nonce: str, code_verifier: str) -> str:
        return f"{ISSUER}/auth?state={state}"

    def exchange(self, *, code: str, redirect_uri: str, code_verifier: str) -> dict[str, Any]:
        if code != "good-code":
            raise SsoFailure("code_rejected", "Its token endpoint answered 'invalid_grant'.")
        return {"id_token": "header.payload.signature", "access_token": "AT-" + "s" * 40}

    def id_claims(self, id_token: str, *, nonce: str, access_token: str | None = None) -> dict[str, Any]:
        return dict(self.claims)

    def userinfo(self, access_token: str) -> dict[str, Any]:
        return dict(self.info)


@pytest.fixture
def fake(settings, monkeypatch):
    settings.OIDC = {**settings.OIDC, "ISSUER": ISSUER, "CLIENT_ID": "agentsite", "CREATE_USERS": True,
                     "ADMIN_GROUPS": [], "ALLOWED_GROUPS": [], "GROUPS_CLAIM": "groups"}

    def use(claims: dict[str, Any], info: dict[str, Any] | None = None) -> FakeProvider:
        stand_in = FakeProvider(claims, info)
        monkeypatch.setattr(views, "provider", lambda: stand_in)
        return stand_in

    return use


@pytest.mark.parametrize(("redirect_uri", "secure"), [("", False),
                                                      ("https://agentsite.example.com/api/auth/oidc/callback", True)])
def test_the_cookies_are_http_only_lax_narrow_and_secure_behind_https(anon_client, fake, settings, redirect_uri,
                                                                      secure):
    settings.OIDC = {**settings.OIDC, "REDIRECT_URI": redirect_uri}
    fake({"sub": "s-1", "nonce": "n", "preferred_username": "alice"})
    started = anon_client.get("/api/auth/oidc/login")
    assert started.status_code == 302 and started["Cache-Control"] == "no-store"
    bound = started.cookies[views.BROWSER_COOKIE]
    assert (bound["httponly"], bound["samesite"], bound["path"], bool(bound["secure"])) == (
        True, "Lax", "/api/auth/oidc/", secure)
    state = started["Location"].split("state=")[1]
    finished = anon_client.get(CALLBACK, {"state": state, "code": "good-code"})
    assert finished.status_code == 302 and finished["Location"] == "/#/sso"
    handed = finished.cookies[views.TICKET_COOKIE]
    assert (handed["httponly"], handed["samesite"], handed["path"], bool(handed["secure"])) == (
        True, "Lax", "/api/auth/oidc/session", secure)
    assert int(handed["max-age"]) == 60


def test_a_short_or_missing_browser_cookie_is_replaced_and_a_long_one_kept(anon_client, fake):
    fake({"sub": "s-1", "nonce": "n"})
    anon_client.cookies[views.BROWSER_COOKIE] = "x" * 31  # guessable: never the binding
    first = anon_client.get("/api/auth/oidc/login").cookies[views.BROWSER_COOKIE].value
    assert len(first) >= 32 and first != "x" * 31
    second = anon_client.get("/api/auth/oidc/login").cookies[views.BROWSER_COOKIE].value
    assert second == first  # two tabs signing in at once both finish
    assert LoginAttempt.objects.filter(browser=digest(first)).count() == 2


def start(client: Any) -> str:
    return client.get("/api/auth/oidc/login")["Location"].split("state=")[1]


def test_a_callback_in_another_browser_is_refused_and_uses_the_state_up(anon_client, fake):
    fake({"sub": "s-1", "nonce": "n", "preferred_username": "alice"})
    state = start(anon_client)
    attacker = client_for()
    attacker.cookies[views.BROWSER_COOKIE] = BROWSER
    answer = attacker.get(CALLBACK, {"state": state, "code": "good-code"})
    assert answer.status_code == 400 and b'<code id="reason">browser_mismatch</code>' in answer.content
    assert not User.objects.filter(username="alice").exists() and not LoginAttempt.objects.exists()
    again = anon_client.get(CALLBACK, {"state": state, "code": "good-code"})
    assert b'<code id="reason">state_invalid</code>' in again.content


def test_the_callbacks_query_is_never_on_the_page_or_in_the_audit(anon_client, fake):
    fake({"sub": "s-1", "nonce": "n"})
    code = "CODE-" + secrets.token_urlsafe(24)
    for params in ({"state": "forged-" + secrets.token_urlsafe(8), "code": code},
                   {"state": start(anon_client), "code": code}):  # a state that holds, a code the provider refuses
        answer = anon_client.get(CALLBACK, params)
        assert answer.status_code == 400 and answer["Cache-Control"] == "no-store"
        assert code not in answer.content.decode() and params["state"] not in answer.content.decode()
    events = AuditEvent.objects.filter(action="auth.sso_failed")
    assert {event.details["reason"] for event in events} == {"state_invalid", "code_rejected"}
    assert all(code not in str(event.details) for event in events)


def test_a_userinfo_answer_about_another_subject_is_refused_and_changes_nothing(anon_client, fake):
    fake({"sub": "s-1", "nonce": "n", "preferred_username": "alice"},
         {"sub": "s-2", "email": "victim@example.com", "email_verified": True, "groups": ["root"]})
    answer = anon_client.get(CALLBACK, {"state": start(anon_client), "code": "good-code"})
    assert answer.status_code == 502 and b'<code id="reason">provider_invalid</code>' in answer.content
    assert not User.objects.filter(username="alice").exists() and not Identity.objects.exists()
    assert not Ticket.objects.exists() and not SsoSession.objects.exists()


def test_the_id_tokens_claims_win_over_userinfos(anon_client, fake, settings):
    settings.OIDC = {**settings.OIDC, "ADMIN_GROUPS": ["root"]}
    fake({"sub": "s-1", "nonce": "n", "preferred_username": "alice", "groups": ["eng"]},
         {"sub": "s-1", "preferred_username": "root", "groups": ["root"]})
    answer = anon_client.get(CALLBACK, {"state": start(anon_client), "code": "good-code"})
    assert answer.status_code == 302
    user = User.objects.get(sso_identities__subject="s-1")
    assert user.username == "alice" and not user.is_staff and not user.is_superuser


# --- names that read like others ---------------------------------------------------------------------------------

def test_a_username_that_reads_like_an_existing_one_is_made_unique_against_it(fake, django_user_model):
    from sso.accounts import sign_in

    django_user_model.objects.create_user(username="admin", password="x" * 12)
    user, _ = sign_in(issuer=ISSUER, claims={"sub": "s-1", "preferred_username": "\uff41dmin"})  # fullwidth a
    assert user.username == "admin-2"
    ligature, _ = sign_in(issuer=ISSUER, claims={"sub": "s-2", "preferred_username": "o\ufb03ce"})  # "ffi"
    assert ligature.username == "office"


@pytest.mark.parametrize("sent", ["ops_admins", "ops.admins", "/ops admins", "OPS ADMINS", "ops  admins"])
def test_admin_and_allowed_groups_are_never_matched_after_normalisation(fake, settings, sent):
    """A claim value that would become the same group name here is not the configured group."""
    from sso.accounts import sign_in

    settings.OIDC = {**settings.OIDC, "ADMIN_GROUPS": ["ops admins"], "ALLOWED_GROUPS": ["ops admins", "staff"]}
    with pytest.raises(SsoFailure) as caught:
        sign_in(issuer=ISSUER, claims={"sub": "s-1", "groups": [sent]})
    assert caught.value.reason == "not_allowed"
    user, _ = sign_in(issuer=ISSUER, claims={"sub": "s-1", "groups": [sent, "staff"]})
    assert not user.is_staff and not user.is_superuser

"""The sign-in doors' own rules, with the database and no provider: how long a state and a ticket live (at the limit
and one past it), the provider's error_description on the page, and the limit on starting sign-ins."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.models import AuditEvent
from sso import views
from sso.models import LoginAttempt, SsoSession, Ticket
from tests.server import refusing_port

pytestmark = pytest.mark.django_db

NOW = timezone.now()
BROWSER = "b" * 43
CALLBACK = "/api/auth/oidc/callback"


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


@pytest.fixture
def frozen(monkeypatch):
    """timezone.now() is NOW for the test: an age set on a row is its age when the view looks."""
    monkeypatch.setattr(timezone, "now", lambda: NOW)


@pytest.fixture
def configured(settings):
    """A provider whose address refuses connections: a view that reaches for it answers provider_unreachable."""
    settings.OIDC = {**settings.OIDC, "ISSUER": f"http://127.0.0.1:{refusing_port()}", "CLIENT_ID": "agentsite",
                     "CLIENT_SECRET": "secret", "TIMEOUT_S": 2.0}


def attempt(age: timedelta) -> str:
    """A sign-in started `age` ago in BROWSER; its state."""
    state = secrets.token_urlsafe(32)
    row = LoginAttempt.objects.create(state=digest(state), browser=digest(BROWSER), nonce="n", code_verifier="v",
                                      redirect_uri=f"http://testserver{CALLBACK}")
    LoginAttempt.objects.filter(pk=row.pk).update(created_at=NOW - age)
    return state


def callback(client, state: str, **params: str):
    client.cookies[views.BROWSER_COOKIE] = BROWSER
    return client.get(CALLBACK, {"state": state, **params})


def reason_of(response) -> str:
    text = response.content.decode()
    start = text.index('<code id="reason">') + len('<code id="reason">')
    return text[start:text.index("</code>", start)]


@pytest.mark.parametrize(("age", "reason"), [
    (timedelta(minutes=10), "provider_error"),  # the state held: the answer is the provider's refusal
    (timedelta(minutes=10, seconds=1), "state_invalid")])
def test_a_state_lives_ten_minutes_and_not_a_second_more(anon_client, frozen, age, reason):
    answer = callback(anon_client, attempt(age), error="access_denied")
    assert reason_of(answer) == reason
    assert answer["Cache-Control"] == "no-store"
    assert not LoginAttempt.objects.exists()  # used up either way


def ticket(user, age: timedelta) -> str:
    value = secrets.token_urlsafe(32)
    session = SsoSession.objects.create(key=secrets.token_urlsafe(24), user=user, issuer="https://idp.example",
                                        id_token="x.y.z")
    row = Ticket.objects.create(hash=digest(value), user=user, session=session)
    Ticket.objects.filter(pk=row.pk).update(created_at=NOW - age)
    return value


def collect(client, value: str):
    client.cookies[views.TICKET_COOKIE] = value
    return client.post("/api/auth/oidc/session")


@pytest.mark.parametrize(("age", "status"), [(timedelta(seconds=60), 200), (timedelta(seconds=61), 401)])
def test_a_ticket_lives_sixty_seconds_and_not_a_second_more(anon_client, owner, frozen, age, status):
    answer = collect(anon_client, ticket(owner, age))
    assert answer.status_code == status, answer.content
    if status == 401:
        assert answer.json()["error"]["code"] == "token_invalid"
    else:
        assert answer.json()["sso"] is True and answer.json()["user"]["username"] == owner.username


def test_a_ticket_is_collected_once_and_not_by_a_deactivated_user(anon_client, owner, other_user, frozen):
    value = ticket(owner, timedelta(0))
    assert collect(anon_client, value).status_code == 200
    assert collect(anon_client, value).status_code == 401
    other_user.is_active = False
    other_user.save()
    refused = collect(anon_client, ticket(other_user, timedelta(0)))
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "token_invalid"


@pytest.mark.parametrize("length", [views.ERROR_DESCRIPTION_MAX, views.ERROR_DESCRIPTION_MAX + 1])
def test_the_providers_error_description_is_shown_escaped_and_cut(anon_client, length, frozen):
    head = "<script>alert(1)</script>"
    description = head + "d" * (length - len(head) - 1) + "Z"
    answer = callback(anon_client, attempt(timedelta(0)), error="access_denied", error_description=description)
    text = answer.content.decode()
    assert answer.status_code == 403 and reason_of(answer) == "provider_error"
    assert "<script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    shown = "d" * (length - len(head) - 1) + ("Z" if length <= views.ERROR_DESCRIPTION_MAX else "")
    assert f"{shown}." in text  # the page's sentence ends right after what was kept
    event = AuditEvent.objects.get(action="auth.sso_failed")
    assert event.details["reason"] == "provider_error" and event.outcome == "refused"


def test_a_sign_in_not_configured_answers_a_404_page(anon_client):
    answer = anon_client.get("/api/auth/oidc/login")
    assert answer.status_code == 404 and reason_of(answer) == "not_configured"


def test_starting_sign_ins_is_limited_to_thirty_a_minute_per_client_address(anon_client, configured, settings):
    assert settings.OIDC["LOGIN_RATE_LIMIT"] == 30
    for number in range(30):
        answer = anon_client.get("/api/auth/oidc/login", REMOTE_ADDR="192.0.2.1")
        assert (answer.status_code, reason_of(answer)) == (502, "provider_unreachable"), number
    refused = anon_client.get("/api/auth/oidc/login", REMOTE_ADDR="192.0.2.1")
    assert (refused.status_code, reason_of(refused)) == (429, "rate_limited")
    assert 1 <= int(refused["Retry-After"]) <= 61 and refused["Cache-Control"] == "no-store"
    assert AuditEvent.objects.filter(action="auth.sso_failed", details__reason="rate_limited").exists()
    elsewhere = anon_client.get("/api/auth/oidc/login", REMOTE_ADDR="192.0.2.2")
    assert (elsewhere.status_code, reason_of(elsewhere)) == (502, "provider_unreachable")


def test_the_limit_is_what_the_settings_say(anon_client, configured, settings):
    settings.OIDC = {**settings.OIDC, "LOGIN_RATE_LIMIT": 2}
    codes = [anon_client.get("/api/auth/oidc/login", REMOTE_ADDR="192.0.2.3").status_code for _ in range(3)]
    assert codes == [502, 502, 429]

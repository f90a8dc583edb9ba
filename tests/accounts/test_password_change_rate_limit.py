"""POST /api/auth/change-password takes the login's limit (AGENTSITE_LOGIN_RATE_LIMIT attempts a minute) per user
and per client address: each wrong old password costs a password hash, and a stolen token must not let anyone
guess the password behind it at the server's full speed."""

from __future__ import annotations

import pytest

from accounts.models import AuditEvent
from tests.conftest import PASSWORD, client_for

pytestmark = pytest.mark.django_db

NEW_PASSWORD = "another-fine-password"
LIMIT = 10  # the default, asserted below


def _change(client, old: str, address: str = "127.0.0.1"):
    return client.post("/api/auth/change-password", {"old_password": old, "new_password": NEW_PASSWORD},
                       format="json", REMOTE_ADDR=address)


def _assert_limited(response) -> None:
    assert response.status_code == 429, response.content
    assert response.json()["error"]["code"] == "rate_limited"
    assert 1 <= int(response["Retry-After"]) <= 61
    assert response.json()["error"]["details"]["retry_after"] == int(response["Retry-After"])


def test_the_limit_is_the_logins(settings):
    assert settings.LOGIN_RATE_LIMIT == LIMIT


def test_wrong_old_passwords_past_the_limit_answer_429_and_then_the_right_one_too(owner):
    client = client_for(owner)
    for attempt in range(LIMIT):
        answer = _change(client, f"wrong-{attempt}")
        assert answer.status_code == 400, f"attempt {attempt + 1} of {LIMIT}: {answer.content!r}"
    _assert_limited(_change(client, "wrong-again"))
    _assert_limited(_change(client, PASSWORD))  # while limited, the right password is refused as well
    owner.refresh_from_db()
    assert owner.check_password(PASSWORD)


def test_the_limit_follows_the_user_across_client_addresses(owner):
    client = client_for(owner)
    for attempt in range(LIMIT):
        assert _change(client, "wrong", address=f"10.0.0.{attempt + 1}").status_code == 400
    _assert_limited(_change(client, "wrong", address="10.0.1.1"))


def test_the_limit_follows_the_client_address_across_users(owner, other_user):
    for attempt in range(LIMIT):
        user = owner if attempt % 2 else other_user
        assert _change(client_for(user), "wrong", address="10.9.9.9").status_code == 400
    _assert_limited(_change(client_for(owner), "wrong", address="10.9.9.9"))
    # From another address, each user is held only to their own count (half the limit each, so far).
    assert _change(client_for(other_user), "wrong", address="10.8.8.8").status_code == 400
    assert _change(client_for(owner), PASSWORD, address="10.8.8.8").status_code == 200


def test_a_limited_attempt_is_audited_as_refused(owner):
    client = client_for(owner)
    for _ in range(LIMIT + 1):
        _change(client, "wrong")
    refused = AuditEvent.objects.filter(action="auth.password_change", outcome="refused")
    assert refused.exists() and refused.first().details["code"] == "rate_limited"


def test_a_right_password_within_the_limit_changes_it(owner):
    client = client_for(owner)
    for _ in range(LIMIT - 1):
        assert _change(client, "wrong").status_code == 400
    assert _change(client, PASSWORD).status_code == 200
    owner.refresh_from_db()
    assert owner.check_password(NEW_PASSWORD)

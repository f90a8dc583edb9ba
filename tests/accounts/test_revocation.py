"""A logout kills the access token it was made with, as a password change kills every earlier one: through every
door (the API, /v1 and /mcp's user lookup), after a restart of the process, and without a query per request
while nothing changes. `credential_problem` (what long streams ask before each event) answers `token_invalid`
for each way a token dies."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from rest_framework.test import APIClient

from accounts.authentication import credential_of, credential_problem, user_for_token, users
from accounts.models import RevokedAccessToken
from accounts.tokens import token_pair_for
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def _client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def _problem(token: str):
    return async_to_sync(credential_problem)(credential_of(f"Bearer {token}"))


def test_logout_stops_the_access_token_it_was_made_with_at_once(owner):
    pair, other_pair = token_pair_for(owner), token_pair_for(owner)
    client = _client(pair["token"])
    assert client.get("/api/auth/me").status_code == 200
    assert client.post("/api/auth/logout", {"refresh": pair["refresh"]}, format="json").status_code == 204
    refused = client.get("/api/auth/me")
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "token_invalid"
    assert user_for_token(pair["token"]) is None
    assert _problem(pair["token"]).code == "token_invalid"
    # Another login of the same user (another device) is not logged out.
    assert _client(other_pair["token"]).get("/api/auth/me").status_code == 200
    assert _problem(other_pair["token"]) is None


def test_a_revoked_token_stays_dead_in_a_process_that_starts_after_the_logout(owner):
    pair = token_pair_for(owner)
    _client(pair["token"]).post("/api/auth/logout", {"refresh": pair["refresh"]}, format="json")
    users.drop(None)  # what a new process has: nothing cached
    assert user_for_token(pair["token"]) is None


def test_a_failed_logout_revokes_nothing(owner, other_user):
    pair, others = token_pair_for(owner), token_pair_for(other_user)
    client = _client(pair["token"])
    answer = client.post("/api/auth/logout", {"refresh": others["refresh"]}, format="json")
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid"
    assert client.get("/api/auth/me").status_code == 200
    assert not RevokedAccessToken.objects.exists()


def test_revocations_are_kept_until_the_token_expires_and_no_longer(owner):
    from datetime import timedelta

    from django.utils import timezone

    from accounts.services import access_token_revoke

    stale = RevokedAccessToken.objects.create(jti="stale", user=owner, expires_at=timezone.now() - timedelta(seconds=1))
    pair = token_pair_for(owner)
    access_token_revoke(user=owner, access=credential_of(f"Bearer {pair['token']}"))
    kept = RevokedAccessToken.objects.get()
    assert kept.pk != stale.pk
    assert abs((kept.expires_at - timezone.now()) - timedelta(minutes=60)) < timedelta(minutes=1)


def test_a_cached_user_with_revoked_tokens_still_costs_no_query(owner, django_assert_num_queries):
    pair, live = token_pair_for(owner), token_pair_for(owner)["token"]
    _client(pair["token"]).post("/api/auth/logout", {"refresh": pair["refresh"]}, format="json")
    assert user_for_token(live).pk == owner.pk  # loads the user and the revocations
    with django_assert_num_queries(0):
        assert user_for_token(live).pk == owner.pk
        assert user_for_token(pair["token"]) is None


@pytest.mark.parametrize("change", ["password", "deactivation", "deletion"])
def test_credential_problem_answers_token_invalid_for_each_way_a_token_dies(owner, change):
    token = token_pair_for(owner)["token"]
    assert _problem(token) is None
    if change == "password":
        owner.set_password(PASSWORD + "-new")
        owner.save()
    elif change == "deactivation":
        owner.is_active = False
        owner.save()
    else:
        owner.delete()
    problem = _problem(token)
    assert problem is not None and problem.code == "token_invalid" and problem.status == 401

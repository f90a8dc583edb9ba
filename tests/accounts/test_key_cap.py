"""The cap on live API keys (accounts.services.MAX_LIVE_KEYS, 100 a user): the 100th key is made, the 101st is a
409 `conflict`; revoked and expired keys do not count, and one user's keys do not count against another's."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.models import ApiKey
from accounts.services import MAX_LIVE_KEYS
from tests.conftest import client_for

pytestmark = pytest.mark.django_db


def _fill(user, count: int) -> None:
    """`count` live keys made directly (the API is tested at the limit, not for the 99 before it)."""
    ApiKey.objects.bulk_create(ApiKey(user=user, name=f"k{n}", prefix=f"ask-{n:08d}", hash=f"{user.pk}-{n:060d}",
                                      scopes=["v1"]) for n in range(count))


def _create(user):
    return client_for(user).post("/api/keys", {"name": "one-more"}, format="json")


def test_the_hundredth_live_key_is_made_and_the_hundred_and_first_is_a_409(owner):
    assert MAX_LIVE_KEYS == 100
    _fill(owner, MAX_LIVE_KEYS - 1)
    assert _create(owner).status_code == 201
    assert ApiKey.objects.filter(user=owner).count() == MAX_LIVE_KEYS
    refused = _create(owner)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "conflict"
    assert ApiKey.objects.filter(user=owner).count() == MAX_LIVE_KEYS


def test_revoked_and_expired_keys_do_not_count_nor_another_users(owner, other_user):
    _fill(owner, MAX_LIVE_KEYS)
    assert _create(owner).status_code == 409
    assert _create(other_user).status_code == 201
    ApiKey.objects.filter(user=owner, name="k0").update(revoked=True, revoked_at=timezone.now())
    assert _create(owner).status_code == 201
    ApiKey.objects.filter(user=owner, name="k1").update(expires_at=timezone.now() - timedelta(seconds=1))
    assert _create(owner).status_code == 201
    assert _create(owner).status_code == 409

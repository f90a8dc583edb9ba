"""Rows past their time do not pile up (oauth.trim): consents past their ten minutes, codes an hour past their
minute, tokens past their refresh token's end; each new registration and authorization request trims, and
nothing still usable (or whose replay must still be caught) goes."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from oauth.models import AccessToken, AuthorizationCode, ConsentRequest
from oauth.trim import CODE_KEPT, expired_rows_trim
from tests.oauth.conftest import authorize, code_for, exchange, register, tokens_for

pytestmark = pytest.mark.django_db


def test_nothing_live_is_trimmed(http, public, owner):
    tokens_for(http, public, owner)
    code_for(http, public, owner)
    authorize(http, public)

    assert expired_rows_trim() == {"consents": 0, "codes": 0, "tokens": 0}
    assert (ConsentRequest.objects.count(), AuthorizationCode.objects.count(), AccessToken.objects.count()) == (1, 2, 1)


def test_a_consent_goes_once_past_its_time(http, public):
    authorize(http, public)
    now = timezone.now()
    ConsentRequest.objects.update(expires_at=now + timedelta(seconds=5))
    assert expired_rows_trim()["consents"] == 0

    ConsentRequest.objects.update(expires_at=now - timedelta(microseconds=1))
    assert expired_rows_trim()["consents"] == 1 and not ConsentRequest.objects.exists()


def test_a_code_is_kept_an_hour_past_its_time_so_that_a_replay_still_revokes(http, public, owner):
    code = code_for(http, public, owner)
    assert exchange(http, public, code).status_code == 200
    AuthorizationCode.objects.update(expires_at=timezone.now() - CODE_KEPT + timedelta(seconds=5))
    assert expired_rows_trim()["codes"] == 0
    assert exchange(http, public, code).status_code == 400
    assert AccessToken.objects.get().revoked_at is not None  # the replay found the code

    AuthorizationCode.objects.update(expires_at=timezone.now() - CODE_KEPT)
    assert expired_rows_trim()["codes"] == 1 and not AuthorizationCode.objects.exists()


def test_a_token_goes_once_its_refresh_token_ended_and_one_without_once_it_expired(http, public, owner):
    tokens_for(http, public, owner)
    tokens_for(http, public, owner)
    with_refresh, without = AccessToken.objects.order_by("pk")
    AccessToken.objects.filter(pk=without.pk).update(refresh_hash=None, refresh_expires_at=None)
    now = timezone.now()
    AccessToken.objects.update(expires_at=now - timedelta(seconds=1))
    AccessToken.objects.filter(pk=with_refresh.pk).update(refresh_expires_at=now + timedelta(seconds=5))

    assert expired_rows_trim()["tokens"] == 1
    assert list(AccessToken.objects.values_list("pk", flat=True)) == [with_refresh.pk]

    AccessToken.objects.update(refresh_expires_at=now)
    assert expired_rows_trim()["tokens"] == 1 and not AccessToken.objects.exists()


def test_a_registration_and_an_authorization_request_trim(http, public):
    authorize(http, public)
    ConsentRequest.objects.update(expires_at=timezone.now())
    assert register(http).status_code == 201
    assert not ConsentRequest.objects.exists()

    authorize(http, public)
    ConsentRequest.objects.update(expires_at=timezone.now())
    authorize(http, public)
    assert ConsentRequest.objects.count() == 1

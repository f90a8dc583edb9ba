"""The per-process cache of the users bearer tokens name (accounts.authentication.UserCache): a cached user costs
no query; a save or a deletion stops an old token at once; what no announcement reaches expires with the
time to live; a load that raced a drop is not kept; callers never share the cached row."""

from __future__ import annotations

import time

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone
from rest_framework.exceptions import AuthenticationFailed

from accounts.authentication import api_keys, auser_for_token, jwt_auth, user_cache, user_for_token, users
from accounts.models import ApiKey
from accounts.tokens import token_pair_for
from agentsite.core import invalidation
from organisation import selectors, services
from organisation.models import Membership
from tests.conftest import client_for

pytestmark = pytest.mark.django_db


def test_a_cached_user_costs_no_query(owner, django_assert_num_queries):
    token = token_pair_for(owner)["token"]
    assert user_for_token(token).pk == owner.pk  # loads
    with django_assert_num_queries(0):
        assert user_for_token(token).pk == owner.pk
        assert owner_client_me(token).status_code == 200


def owner_client_me(token: str):
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client.get("/api/auth/me")


@pytest.mark.django_db(transaction=True)
async def test_the_async_door_reads_the_cache_without_a_database_thread(owner, monkeypatch):
    token = (await sync_to_async(token_pair_for)(owner))["token"]
    assert (await auser_for_token(token)).pk == owner.pk

    async def no_database(*args, **kwargs):
        raise AssertionError("a cached user went to the database")

    monkeypatch.setattr("agentsite.core.dbcall.db", no_database)
    assert (await auser_for_token(token)).pk == owner.pk


def test_a_password_change_stops_the_old_token_at_once(owner):
    token = token_pair_for(owner)["token"]
    assert user_for_token(token) is not None
    owner.set_password("another-horse-battery-7")
    owner.save()
    assert user_for_token(token) is None
    assert user_for_token(token_pair_for(owner)["token"]).pk == owner.pk


def test_deactivation_and_deletion_stop_the_token_at_once(owner, other_user):
    token, other = token_pair_for(owner)["token"], token_pair_for(other_user)["token"]
    assert user_for_token(token) and user_for_token(other)
    owner.is_active = False
    owner.save(update_fields=["is_active"])
    other_user.delete()
    assert user_for_token(token) is None
    assert user_for_token(other) is None
    assert owner_client_me(token).status_code == 401


def test_a_lost_admin_flag_is_a_403_on_the_next_request(admin):
    token = token_pair_for(admin)["token"]
    client_headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    from rest_framework.test import APIClient

    client = APIClient()
    assert client.patch("/api/config", {"temperature": 0.5}, format="json", **client_headers).status_code == 200
    admin.is_staff = admin.is_superuser = False
    admin.save()
    assert client.patch("/api/config", {"temperature": 0.4}, format="json", **client_headers).status_code == 403


class FakeClock:
    """the authentication modules' `time` module, with the clocks the test moves."""

    def __init__(self) -> None:
        self.offset = 0.0
        for name in dir(time):
            if not name.startswith("_") and name not in ("monotonic", "time"):
                setattr(self, name, getattr(time, name))

    def monotonic(self) -> float:
        return time.monotonic() + self.offset

    def time(self) -> float:
        return time.time() + self.offset


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    for module in (user_cache, jwt_auth, api_keys, selectors):  # the modules that read the clock
        monkeypatch.setattr(module, "time", fake)
    return fake


def test_a_change_no_signal_announces_is_seen_after_the_time_to_live_where_no_channel_is_heard(
        owner, settings, clock, monkeypatch):
    monkeypatch.setattr(invalidation, "connected", lambda: False)  # PostgreSQL without Redis
    settings.AGENTSITE_AUTH_CACHE_S = 2
    token = token_pair_for(owner)["token"]
    assert user_for_token(token) is not None
    type(owner).objects.filter(pk=owner.pk).update(is_active=False)  # no post_save: nothing announced
    clock.offset = 1.9
    assert user_for_token(token) is not None  # still the cached row, within its time to live
    clock.offset = 2.1
    assert user_for_token(token) is None


@pytest.fixture
def heard(monkeypatch) -> None:
    """This process hears the others' announcements (every serve worker on SQLite, or with Redis)."""
    monkeypatch.setattr(invalidation, "connected", lambda: True)


MINUTE = invalidation.CONNECTED_TTL_S


def test_while_the_channel_is_heard_a_change_no_signal_announces_waits_up_to_a_minute(owner, settings, clock, heard):
    settings.AGENTSITE_AUTH_CACHE_S = 2
    token = token_pair_for(owner)["token"]
    assert user_for_token(token) is not None
    type(owner).objects.filter(pk=owner.pk).update(is_active=False)  # no post_save: nothing announced
    clock.offset = 2.1
    assert user_for_token(token) is not None  # past AGENTSITE_AUTH_CACHE_S, but every announced change arrives
    clock.offset = MINUTE - 0.1
    assert user_for_token(token) is not None
    clock.offset = MINUTE + 0.1
    assert user_for_token(token) is None


def test_a_longer_setting_than_a_minute_is_kept_and_zero_keeps_nothing(owner, settings, clock, heard):
    settings.AGENTSITE_AUTH_CACHE_S = MINUTE * 2
    token = token_pair_for(owner)["token"]
    assert user_for_token(token) is not None
    type(owner).objects.filter(pk=owner.pk).update(is_active=False)
    clock.offset = MINUTE + 0.1
    assert user_for_token(token) is not None
    settings.AGENTSITE_AUTH_CACHE_S = 0
    users.drop(None)
    type(owner).objects.filter(pk=owner.pk).update(is_active=True)
    assert user_for_token(token) is not None
    type(owner).objects.filter(pk=owner.pk).update(is_active=False)
    assert user_for_token(token) is None  # read again: nothing was kept


def test_losing_the_channel_drops_every_entry_and_the_next_lives_the_short_life(owner, settings, clock,
                                                                                 monkeypatch):
    settings.AGENTSITE_AUTH_CACHE_S = 2
    hearing = [True]
    monkeypatch.setattr(invalidation, "connected", lambda: hearing[0])
    token = token_pair_for(owner)["token"]
    assert user_for_token(token) is not None  # kept for a minute
    hearing[0] = False
    invalidation._apply_all()  # what the listener does when it loses Redis
    type(owner).objects.filter(pk=owner.pk).update(is_active=False)
    assert user_for_token(token) is None  # the minute-long entry is gone
    type(owner).objects.filter(pk=owner.pk).update(is_active=True)
    clock.offset = 1.9
    assert user_for_token(token) is None  # the entry read without the channel...
    clock.offset = 2.1
    assert user_for_token(token) is not None  # ...lives AGENTSITE_AUTH_CACHE_S


def test_an_api_key_and_the_memberships_live_as_long_as_a_user_while_the_channel_is_heard(owner, settings, clock,
                                                                                         heard):
    settings.AGENTSITE_AUTH_CACHE_S = 2
    answer = client_for(owner).post("/api/keys", {"name": "laptop"}, format="json")
    secret = answer.json()["key"]
    group = services.group_create(name="night-shift")
    services.member_add(group=group, user_id=owner.pk)
    assert api_keys.authenticate_key(secret)[0].pk == owner.pk
    assert [(g.name, g.role) for g in selectors.memberships(owner.pk)] == [("night-shift", "member")]
    ApiKey.objects.filter(pk=answer.json()["id"]).update(revoked=True, revoked_at=timezone.now())  # not announced
    Membership.objects.filter(user=owner).update(role="manager")
    clock.offset = MINUTE - 0.1
    assert api_keys.authenticate_key(secret)[0].pk == owner.pk
    assert [g.role for g in selectors.memberships(owner.pk)] == ["member"]
    clock.offset = MINUTE + 0.1
    with pytest.raises(AuthenticationFailed, match="revoked"):
        api_keys.authenticate_key(secret)
    assert [g.role for g in selectors.memberships(owner.pk)] == ["manager"]


def test_a_load_that_raced_a_drop_is_not_kept(owner, monkeypatch):
    real = user_cache.password_version

    def dropped_meanwhile(user):
        users.drop(str(user.pk))  # a save announced while this load was reading the old row
        return real(user)

    monkeypatch.setattr(user_cache, "password_version", dropped_meanwhile)
    assert users.load(owner.pk) is not None  # the caller still gets what it read...
    assert users.fresh(owner.pk) == (False, None)  # ...but the cache did not keep it
    monkeypatch.setattr(user_cache, "password_version", real)
    users.load(owner.pk)
    assert users.fresh(owner.pk)[0]


def test_callers_get_copies_not_the_cached_row(owner):
    token = token_pair_for(owner)["token"]
    first = user_for_token(token)
    first.username = "changed-in-one-request"
    first.set_password("not-saved-anywhere-1")
    second = user_for_token(token)
    assert second is not first
    assert second.username == owner.username
    assert second.check_password("not-saved-anywhere-1") is False


def test_a_validated_token_is_reused_until_it_expires_and_bad_ones_are_never_kept(owner, monkeypatch, clock):
    from datetime import timedelta

    from rest_framework_simplejwt.authentication import JWTAuthentication
    from rest_framework_simplejwt.tokens import AccessToken

    from accounts.tokens import PASSWORD_CLAIM, password_version

    full_checks = []
    check = JWTAuthentication.get_validated_token

    def counted(self, raw_token):
        full_checks.append(raw_token)
        return check(self, raw_token)

    monkeypatch.setattr(JWTAuthentication, "get_validated_token", counted)
    token = AccessToken.for_user(owner)
    token[PASSWORD_CLAIM] = password_version(owner)
    token.set_exp(lifetime=timedelta(minutes=5))
    raw = str(token)
    assert user_for_token(raw).pk == owner.pk
    assert raw in jwt_auth._validated_tokens and len(full_checks) == 1
    assert user_for_token(raw).pk == owner.pk
    assert len(full_checks) == 1  # reused: no second signature check
    assert user_for_token(raw[:-2] + ("AA" if not raw.endswith("AA") else "BB")) is None  # a bad signature
    assert len([key for key in jwt_auth._validated_tokens if key.startswith(raw[:-2])]) == 1
    checks = len(full_checks)
    clock.offset = 5 * 60 + 1  # past the token's expiry
    user_for_token(raw)
    assert len(full_checks) == checks + 1  # the cached validation does not outlive the token: checked again


@pytest.mark.django_db
def test_a_token_newer_than_the_cached_user_reads_the_user_again(owner):
    # Another process changed the password (its announcement not here yet): the token it issued names the new
    # version, newer than this process's cached entry. It is accepted (the entry read again), and a token of
    # the old password stays refused.
    old = token_pair_for(owner)["token"]
    assert user_for_token(old) is not None  # cached now
    type(owner).objects.filter(pk=owner.pk).update(password="pbkdf2_sha256$1$other$changed")  # no signal
    owner.refresh_from_db()
    new = token_pair_for(owner)["token"]
    assert user_for_token(new) is not None
    assert user_for_token(old) is None


@pytest.mark.parametrize("placeholder", ["sk-anything", "x", "sk-proj-abc.def", "a.b", "a.b.c.d", "not a token",
                                         "é.é.é", ""])
def test_what_is_no_jwt_is_no_token_without_a_validation(owner, monkeypatch, placeholder):
    """An anonymous /v1 caller's placeholder key (any string) costs no signature check and no exception."""
    from accounts.authentication import JWTAuthentication, credential_of
    from accounts.authentication.jwt_auth import _validated

    validations = []

    def counted(self, raw_token):
        validations.append(raw_token)
        raise AssertionError("a placeholder is validated")  # (_validated takes any exception for "no token")

    monkeypatch.setattr(JWTAuthentication, "get_validated_token", counted)
    assert _validated(placeholder) is None
    assert credential_of(f"Bearer {placeholder}") is None
    assert validations == []


def test_a_jwt_shaped_string_is_still_validated(owner):
    from accounts.authentication.jwt_auth import _validated

    raw = token_pair_for(owner)["token"]
    assert _validated(raw) is not None
    head, payload, signature = raw.split(".")
    assert _validated(f"{head}.{payload}.") is None  # no signature: refused by the check, not by the shape
    assert _validated(f"{head}.{payload}x.{signature}") is None

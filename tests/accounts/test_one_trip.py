"""A request whose caches have all lapsed (its key, its user, the user's memberships and budgets: each lives
AGENTSITE_AUTH_CACHE_S or BUDGET_CACHE_S) reads them on one trip to a database thread, not one per cache: the
other apps' caches register with the user's (agentsite.core.usercaches)."""

from __future__ import annotations

import logging

import pytest
from asgiref.sync import async_to_sync

from accounts.authentication.api_keys import aauthenticate_key, keys
from accounts.authentication.user_cache import users
from agentsite.agent.usage import Caller
from agentsite.core import dbcall, invalidation, usercaches
from organisation import selectors
from organisation.modelaccess import GroupModelPolicy
from tests.conftest import client_for
from usage import budgets
from usage.metering import scopes_for

pytestmark = pytest.mark.django_db


def _lapse_everything() -> None:
    keys.drop(None)
    users.drop(None)
    selectors.drop(None)
    budgets.drop_user_budget(None)
    budgets.drop_group_budgets(None)


def _trips(monkeypatch) -> list[str]:
    """The names of the functions handed to a database thread from now on."""
    handed: list[str] = []
    call = dbcall._call

    def counted(fn, args, kwargs):
        handed.append(getattr(fn, "__qualname__", repr(fn)))
        return call(fn, args, kwargs)

    monkeypatch.setattr(dbcall, "_call", counted)
    return handed


@pytest.fixture
def connected(monkeypatch):
    """This process hears the others' announcements (as every serve worker on SQLite or with Redis does)."""
    monkeypatch.setattr(invalidation, "connected", lambda: True)


def _standing(secret: str) -> None:
    """What a metered call with this key asks before it goes out: the key, its user, the model access (the
    memberships) and the budgets."""
    async def ask() -> None:
        user, key = await aauthenticate_key(secret)
        caller = Caller.with_key(user.pk, key, "v1")
        await GroupModelPolicy().allowed(caller)
        await scopes_for(caller)
    async_to_sync(ask)()


def test_a_keyed_call_whose_caches_all_lapsed_crosses_to_a_database_thread_once(owner, connected, monkeypatch):
    secret = client_for(owner).post("/api/keys", {"name": "laptop"}, format="json").json()["key"]
    _lapse_everything()
    handed = _trips(monkeypatch)
    _standing(secret)
    assert handed == ["_load_entries"]
    handed.clear()
    _standing(secret)  # all of it cached now
    assert handed == []


def test_without_the_registered_loaders_each_cache_is_a_trip_of_its_own(owner, connected, monkeypatch):
    """The trips the registration saves (this test fails the first one's premise if they cost nothing anyway)."""
    secret = client_for(owner).post("/api/keys", {"name": "laptop"}, format="json").json()["key"]
    monkeypatch.setattr(usercaches, "_loaders", [])
    _lapse_everything()
    handed = _trips(monkeypatch)
    _standing(secret)
    assert handed == ["_load_entries", "memberships", "_load"]


def test_reading_a_user_reads_the_caches_registered_with_it(owner, connected):
    _lapse_everything()
    assert selectors.memberships_peek(owner.pk) is None and budgets.user_budget_peek(owner.pk) is None
    users.load(owner.pk)
    assert selectors.memberships_peek(owner.pk) == ()
    assert budgets.user_budget_peek(owner.pk) == {}
    assert budgets.group_scopes_peek(owner.pk) == ()


def test_where_no_announcement_arrives_reading_a_user_reads_nothing_more(owner, monkeypatch, django_assert_num_queries):
    monkeypatch.setattr(invalidation, "connected", lambda: False)
    _lapse_everything()
    with django_assert_num_queries(2):  # the user and their revoked tokens: the other caches would keep nothing
        users.load(owner.pk)


def test_a_registered_loader_that_fails_leaves_the_users_read_whole_and_says_so(owner, connected, monkeypatch,
                                                                                caplog):
    def broken(user_id):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(usercaches, "_loaders", [broken, selectors.memberships])
    _lapse_everything()
    with caplog.at_level(logging.WARNING, logger="agentsite.core.usercaches"):
        entry = users.load(owner.pk)
    assert entry is not None and entry.user.pk == owner.pk
    assert users.fresh(owner.pk) == (True, entry)
    assert selectors.memberships_peek(owner.pk) == ()  # the next loader still ran
    assert "the database went away" in caplog.text and "broken" in caplog.text

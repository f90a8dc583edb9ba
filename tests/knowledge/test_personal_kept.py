"""Whether a user has a personal collection is kept per process (knowledge.selectors.has_personal): a turn of a
user without one asks the database nothing about it while announcements arrive; the collection made on first use
is found by the next turn at once and announced to the other processes; one handed over stops being found."""

from __future__ import annotations

import pytest

from agentsite.core import invalidation
from knowledge.selectors import PERSONAL_TOPIC, has_personal, personal_collection_for_turn
from knowledge.services import collection_personal, collection_transfer
from tests.announcements import hearing, recorded

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def channel(monkeypatch):
    yield from hearing(monkeypatch, has_personal)


@pytest.fixture
def announced(monkeypatch) -> list:
    return recorded(monkeypatch)


def test_a_user_without_one_costs_one_query_and_then_none(django_user_model, channel, django_assert_num_queries):
    user = django_user_model.objects.create_user("nell", password="pw-long-enough-1")
    with django_assert_num_queries(1):
        assert personal_collection_for_turn(user.pk) is None
    with django_assert_num_queries(0):
        assert personal_collection_for_turn(user.pk) is None


def test_the_collection_made_on_first_use_is_found_at_once_and_announced(django_user_model, channel, announced):
    user = django_user_model.objects.create_user("nell", password="pw-long-enough-1")
    assert personal_collection_for_turn(user.pk) is None  # "none" is kept now
    made = collection_personal(user.pk)
    assert (PERSONAL_TOPIC, str(user.pk)) in announced
    assert personal_collection_for_turn(user.pk) == made


def test_a_handed_over_personal_collection_is_no_longer_found(django_user_model, channel):
    user = django_user_model.objects.create_user("nell", password="pw-long-enough-1")
    heir = django_user_model.objects.create_user("otto", password="pw-long-enough-1")
    collection_personal(user.pk)
    assert personal_collection_for_turn(user.pk) is not None  # "has one" is kept now
    assert personal_collection_for_turn(heir.pk) is None
    collection = personal_collection_for_turn(user.pk)
    collection_transfer(collection, heir)
    assert personal_collection_for_turn(user.pk) is None
    assert personal_collection_for_turn(heir.pk) is None  # an ordinary collection of the heir now


def test_where_no_announcement_arrives_every_turn_asks(django_user_model, channel, monkeypatch,
                                                       django_assert_num_queries):
    user = django_user_model.objects.create_user("nell", password="pw-long-enough-1")
    assert personal_collection_for_turn(user.pk) is None
    monkeypatch.setattr(invalidation, "connected", lambda: False)
    with django_assert_num_queries(1):
        assert personal_collection_for_turn(user.pk) is None

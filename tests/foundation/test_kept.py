"""agentsite.core.kept: an answer is kept only while the invalidation channel is heard, dropped by key or whole,
never kept when a drop raced its load, lapses after its time to live, and the oldest goes past max_entries."""

from __future__ import annotations

import pytest

from agentsite.core import invalidation, kept
from agentsite.core.kept import Kept


class Loads:
    """A loader that counts its calls and answers what `answers` holds for a key (default: the key doubled)."""

    def __init__(self) -> None:
        self.calls: list[object] = []
        self.during = None  # called inside a load: what happens meanwhile in another thread

    def __call__(self, key):
        self.calls.append(key)
        if self.during is not None:
            self.during()
        return key * 2


@pytest.fixture
def channel(monkeypatch):
    monkeypatch.setattr(invalidation, "connected", lambda: True)
    monkeypatch.setattr(invalidation, "listen", lambda: None)


def made(ttl: float = 60.0, max_entries: int = 10) -> tuple[Kept, Loads]:
    loads = Loads()
    return Kept("test.kept", loads, ttl=ttl, max_entries=max_entries), loads


def test_an_answer_is_loaded_once_and_kept_per_key(channel):
    cache, loads = made()
    assert [cache.get(1), cache.get(1), cache.get(2), cache.get(2)] == [2, 2, 4, 4]
    assert loads.calls == [1, 2]


def test_where_no_announcement_arrives_every_get_loads(channel, monkeypatch):
    cache, loads = made()
    cache.get(1)
    monkeypatch.setattr(invalidation, "connected", lambda: False)  # the listener lost: nothing kept is trusted
    cache.get(1)
    cache.get(1)
    assert loads.calls == [1, 1, 1]


def test_a_drop_of_a_key_or_of_all_loads_again(channel):
    cache, loads = made()
    cache.get(1), cache.get(2)
    cache.drop("1")  # as an announcement carries the key
    cache.get(1), cache.get(2)
    assert loads.calls == [1, 2, 1]
    cache.drop(None)
    cache.get(1), cache.get(2)
    assert loads.calls == [1, 2, 1, 1, 2]


@pytest.mark.django_db(transaction=True)
def test_changed_drops_here_and_announces_the_key_once_committed(channel, monkeypatch):
    cache, loads = made()
    announced = []
    monkeypatch.setattr(invalidation, "announce", lambda topic, key=None: announced.append((topic, key)))
    cache.get(7)
    cache.changed(7)  # outside a transaction: committed, so announced at once
    assert announced == [("test.kept", "7")]
    cache.get(7)
    assert loads.calls == [7, 7]


def test_a_load_that_raced_a_drop_is_answered_but_not_kept(channel):
    cache, loads = made()
    loads.during = lambda: cache.drop("1")  # the announcement of a change committed while the read was on its way
    assert cache.get(1) == 2
    loads.during = None
    cache.get(1)
    assert loads.calls == [1, 1]


def test_an_answer_lapses_after_its_time_to_live(channel, monkeypatch):
    cache, loads = made(ttl=5.0)
    now = kept.time.monotonic()
    monkeypatch.setattr(kept.time, "monotonic", lambda: now)
    cache.get(1)
    monkeypatch.setattr(kept.time, "monotonic", lambda: now + 4.9)
    cache.get(1)
    monkeypatch.setattr(kept.time, "monotonic", lambda: now + 5.1)
    cache.get(1)
    assert loads.calls == [1, 1]


def test_past_max_entries_the_oldest_goes_first(channel):
    cache, loads = made(max_entries=2)
    cache.get(1), cache.get(2), cache.get(3)  # 1 goes
    cache.get(3), cache.get(2)
    assert loads.calls == [1, 2, 3]
    cache.get(1)
    assert loads.calls == [1, 2, 3, 1]


@pytest.mark.django_db
def test_follows_calls_changed_on_each_save_and_delete_of_a_row_it_is_asked_for(channel, monkeypatch):
    from django.contrib.auth.models import Group

    cache, _loads = made()
    changed: list[object] = []
    monkeypatch.setattr(cache, "changed", changed.append)
    cache.follows(Group, key=lambda group: group.name, when=lambda group: not group.name.startswith("quiet"))
    group = Group.objects.create(name="loud")
    Group.objects.create(name="quiet one")  # `when` says no: not called
    group.name = "louder"
    group.save()
    group.delete()
    assert changed == ["loud", "louder", "louder"]
    cache.follows(Group)  # a second call (a repeated ready()) connects nothing more
    Group.objects.create(name="loudest")
    assert changed == ["loud", "louder", "louder", "loudest"]
    every = Kept("test.kept.every", Loads(), ttl=60.0)
    whole: list[object] = []
    monkeypatch.setattr(every, "changed", whole.append)
    every.follows(Group)  # without `key`: every key's answer (None)
    Group.objects.create(name="any")
    assert whole == [None]

"""For the tests of an answer kept per process (agentsite.core.kept.Kept): the process hearing announcements, as
under serve on SQLite or with Redis, and the announcements made."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from agentsite.core import invalidation
from agentsite.core.kept import Kept


def hearing(monkeypatch: pytest.MonkeyPatch, kept: Kept) -> Iterator[None]:
    """For a fixture (`yield from hearing(monkeypatch, kept)`): this process hears the channel, and `kept` holds
    nothing before and after the test. The listener is started first: its subscription drops everything kept
    (what was announced before it is missed), which would otherwise land inside the test's first load and keep
    that answer from being kept (with Redis, when no earlier test of the process started it)."""
    invalidation.listen()
    monkeypatch.setattr(invalidation, "connected", lambda: True)
    kept.drop(None)
    yield
    kept.drop(None)


def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str | None]]:
    """The (topic, key) of every announcement from now on, each still sent."""
    seen: list[tuple[str, str | None]] = []
    real = invalidation.announce
    monkeypatch.setattr(invalidation, "announce",
                        lambda topic, key=None: (seen.append((topic, key)), real(topic, key)))
    return seen


def asked_once_then_kept(listing: Callable[[], object], assert_num_queries) -> None:
    """`listing()` (which finds nothing) asks the database once, then, kept, nothing."""
    with assert_num_queries(1):
        assert not listing()
    with assert_num_queries(0):
        assert not listing()


def asked_each_time_unheard(listing: Callable[[], object], monkeypatch: pytest.MonkeyPatch,
                            assert_num_queries) -> None:
    """Once the listener is lost, nothing kept is trusted: each `listing()` (which finds nothing) asks once."""
    assert not listing()  # kept while the channel was up
    monkeypatch.setattr(invalidation, "connected", lambda: False)
    for _ in range(2):
        with assert_num_queries(1):
            assert not listing()

"""Whether any remote agent exists, kept per process (a2a_app.remotes.any_remote, an agentsite.core.kept.Kept):
with none registered a chat turn's tool listing asks the database nothing while announcements arrive, a remote
registered or deleted is seen at once and announced, and without a channel every listing asks."""

from __future__ import annotations

import pytest

from a2a_app.remotes import REMOTES_TOPIC, A2AToolSource, any_remote
from agentsite.agent.tooltypes import ToolContext
from agentsite.core import invalidation
from tests.conftest import client_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def channel(monkeypatch):
    """This process receives announcements (as under serve on SQLite or with Redis); the cache starts empty."""
    monkeypatch.setattr(invalidation, "connected", lambda: True)
    any_remote.drop()
    yield
    any_remote.drop()


def listed(user) -> list[str]:
    return [tool.name for tool in A2AToolSource().list_tools_now(ToolContext.for_user(user))]


def register(admin, agent, name: str = "echo") -> int:
    response = client_for(admin).post("/api/a2a/remotes", {"name": name, "url": agent.base_url}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def test_with_no_remote_a_listing_asks_the_database_once_and_then_nothing(admin, channel,
                                                                          django_assert_num_queries):
    with django_assert_num_queries(1):
        assert listed(admin) == []
    with django_assert_num_queries(0):
        assert listed(admin) == []


def test_a_remote_registered_or_deleted_is_seen_at_once_and_announced(admin, channel, echo_agent, loopback_allowed,
                                                                      monkeypatch):
    announced = []
    real_announce = invalidation.announce
    monkeypatch.setattr(invalidation, "announce",
                        lambda topic, key=None: (announced.append(topic), real_announce(topic, key)))
    assert listed(admin) == []  # "none" is kept now
    remote_id = register(admin, echo_agent)
    assert listed(admin) == ["a2a_echo"]
    assert REMOTES_TOPIC in announced  # the other processes drop theirs once the row is committed
    announced.clear()
    response = client_for(admin).delete(f"/api/a2a/remotes/{remote_id}")
    assert response.status_code == 204, response.content
    assert listed(admin) == [] and REMOTES_TOPIC in announced


def test_where_no_announcement_arrives_every_listing_asks(admin, channel, monkeypatch, django_assert_num_queries):
    assert listed(admin) == []  # kept while the channel was up
    monkeypatch.setattr(invalidation, "connected", lambda: False)  # the listener lost: nothing kept is trusted
    for _ in range(2):
        with django_assert_num_queries(1):
            assert listed(admin) == []

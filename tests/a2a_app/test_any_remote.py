"""Whether any remote agent exists, kept per process (a2a_app.remotes.any_remote, an agentsite.core.kept.Kept):
with none registered a chat turn's tool listing asks the database nothing while announcements arrive, a remote
registered or deleted is seen at once and announced, and without a channel every listing asks."""

from __future__ import annotations

import pytest

from a2a_app.remotes import REMOTES_TOPIC, A2AToolSource, any_remote
from agentsite.agent.tooltypes import ToolContext
from tests.announcements import asked_each_time_unheard, asked_once_then_kept, hearing, recorded
from tests.conftest import client_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def channel(monkeypatch):
    yield from hearing(monkeypatch, any_remote)


def listed(user) -> list[str]:
    return [tool.name for tool in A2AToolSource().list_tools_now(ToolContext.for_user(user))]


def register(admin, agent, name: str = "echo") -> int:
    response = client_for(admin).post("/api/a2a/remotes", {"name": name, "url": agent.base_url}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def test_with_no_remote_a_listing_asks_the_database_once_and_then_nothing(admin, channel,
                                                                          django_assert_num_queries):
    asked_once_then_kept(lambda: listed(admin), django_assert_num_queries)


def test_a_remote_registered_or_deleted_is_seen_at_once_and_announced(admin, channel, echo_agent, loopback_allowed,
                                                                      monkeypatch):
    announced = recorded(monkeypatch)
    assert listed(admin) == []  # "none" is kept now
    remote_id = register(admin, echo_agent)
    assert listed(admin) == ["a2a_echo"]
    assert (REMOTES_TOPIC, None) in announced  # the other processes drop theirs once the row is committed
    announced.clear()
    response = client_for(admin).delete(f"/api/a2a/remotes/{remote_id}")
    assert response.status_code == 204, response.content
    assert listed(admin) == [] and (REMOTES_TOPIC, None) in announced


def test_where_no_announcement_arrives_every_listing_asks(admin, channel, monkeypatch, django_assert_num_queries):
    asked_each_time_unheard(lambda: listed(admin), monkeypatch, django_assert_num_queries)

"""The stored MCP servers' names, kept per process (mcpbridge.selectors.server_names, an agentsite.core.kept.Kept):
with none stored a chat turn's tool listing asks the database nothing while announcements arrive, a server
stored, renamed or deleted is seen at once and announced, and without a channel every listing asks."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agentsite.agent.tooltypes import ToolContext
from agentsite.core import invalidation
from mcpbridge.models import McpServer
from mcpbridge.selectors import SERVERS_TOPIC, mcp_server_specs_for, server_names
from mcpbridge.source import McpToolSource
from tests.announcements import asked_each_time_unheard, asked_once_then_kept, hearing, recorded

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def channel(monkeypatch):
    yield from hearing(monkeypatch, server_names)


@pytest.fixture
def announced(monkeypatch) -> list[tuple[str, str | None]]:
    return recorded(monkeypatch)


def listed(user) -> list[str]:
    return [tool.name for tool in McpToolSource().list_tools_now(ToolContext.for_user(user))]


def stored(user) -> set[str]:
    return set(mcp_server_specs_for(ToolContext.for_user(user))[0])


def test_with_no_server_a_listing_asks_the_database_once_and_then_nothing(admin, channel,
                                                                          django_assert_num_queries):
    asked_once_then_kept(lambda: listed(admin), django_assert_num_queries)


def test_a_server_stored_renamed_or_deleted_is_seen_at_once_and_announced(admin, channel, announced):
    assert stored(admin) == set()  # "none" is kept now
    server = McpServer.objects.create(name="vault", transport="stdio", command="vault-server")
    assert stored(admin) == {"vault"}
    assert (SERVERS_TOPIC, None) in announced  # the other processes drop theirs once the row is committed
    announced.clear()
    server.name = "safe"
    server.save()
    assert stored(admin) == {"safe"} and (SERVERS_TOPIC, None) in announced
    announced.clear()
    server.delete()
    assert stored(admin) == set() and (SERVERS_TOPIC, None) in announced


def test_a_status_written_by_update_keeps_the_names(admin, channel, monkeypatch):
    """The services write a server's status and tools with update() (no signal): names are not touched, so the
    kept set stays, and a listing asks only for the servers this caller may use: one query fewer than where
    nothing is kept."""
    McpServer.objects.create(name="vault", transport="stdio", command="vault-server")
    assert stored(admin) == {"vault"}
    McpServer.objects.filter(name="vault").update(status=McpServer.ERROR, error="down")
    with CaptureQueriesContext(connection) as kept:
        assert stored(admin) == {"vault"}
    monkeypatch.setattr(invalidation, "connected", lambda: False)
    with CaptureQueriesContext(connection) as unkept:
        assert stored(admin) == {"vault"}
    assert len(kept) == len(unkept) - 1, [query["sql"] for query in kept]


def test_where_no_announcement_arrives_every_listing_asks(admin, channel, monkeypatch, django_assert_num_queries):
    asked_each_time_unheard(lambda: listed(admin), monkeypatch, django_assert_num_queries)

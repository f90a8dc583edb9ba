"""The Streamable HTTP sessions of /mcp in the database: found by their owner only, gone after DELETE or when
idle too long, at most MAX_PER_OWNER per owner."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from mcpbridge.httpsessions import (
    IDLE_S,
    MAX_PER_OWNER,
    http_session_close,
    http_session_find,
    http_session_open,
)
from mcpbridge.models import McpHttpSession

pytestmark = pytest.mark.django_db

VERSION = "2025-11-25"


def test_a_session_is_found_by_its_owner_only_with_its_protocol_version():
    session_id = http_session_open(owner="user:1", protocol_version=VERSION)
    assert http_session_find(session_id=session_id, owner="user:1") == VERSION
    assert http_session_find(session_id=session_id, owner="user:1:key:7") is None
    assert http_session_find(session_id=session_id, owner="user:2") is None


def test_only_the_exact_id_finds_a_session():
    session_id = http_session_open(owner="user:1", protocol_version=VERSION)
    assert http_session_find(session_id=session_id + "0", owner="user:1") is None
    assert http_session_find(session_id=session_id[:-1], owner="user:1") is None
    assert http_session_find(session_id="", owner="user:1") is None


def test_a_closed_session_is_gone_and_only_its_owner_can_close_it():
    session_id = http_session_open(owner="user:1", protocol_version=VERSION)
    assert http_session_close(session_id=session_id, owner="user:2") is False
    assert http_session_close(session_id=session_id, owner="user:1") is True
    assert http_session_find(session_id=session_id, owner="user:1") is None
    assert http_session_close(session_id=session_id, owner="user:1") is False


def idle_for(session_id: str, seconds: float) -> None:
    McpHttpSession.objects.filter(session_id=session_id).update(
        last_seen_at=timezone.now() - timedelta(seconds=seconds))


def test_a_session_lasts_until_it_has_been_idle_for_the_limit():
    kept = http_session_open(owner="user:1", protocol_version=VERSION)
    expired = http_session_open(owner="user:1", protocol_version=VERSION)
    idle_for(kept, IDLE_S - 5)
    idle_for(expired, IDLE_S + 1)
    assert http_session_find(session_id=kept, owner="user:1") == VERSION
    assert http_session_find(session_id=expired, owner="user:1") is None
    # Its use was noted: it has a full idle period again.
    seen = McpHttpSession.objects.get(session_id=kept).last_seen_at
    assert timezone.now() - seen < timedelta(seconds=5)


def test_opening_one_session_past_the_limit_forgets_the_least_recently_used():
    opened = [http_session_open(owner="user:1", protocol_version=VERSION) for _ in range(MAX_PER_OWNER)]
    for age, session_id in enumerate(reversed(opened)):  # the first opened is the least recently used
        idle_for(session_id, 60 + age)
    other = http_session_open(owner="user:2", protocol_version=VERSION)
    assert McpHttpSession.objects.filter(owner="user:1").count() == MAX_PER_OWNER, "a session within the limit went"

    newest = http_session_open(owner="user:1", protocol_version=VERSION)
    assert http_session_find(session_id=opened[0], owner="user:1") is None
    assert all(http_session_find(session_id=s, owner="user:1") for s in [*opened[1:], newest])
    assert http_session_find(session_id=other, owner="user:2") == VERSION

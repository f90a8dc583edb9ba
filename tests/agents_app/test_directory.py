"""The runtime's directory of agents (agents_app.selectors.directory): while this process hears the invalidation
channel it keeps every agent's rule (a resolve costs no query), and any change drops it at once here and, once
committed, in every other process: a save or delete of an agent, a grant, a rule changed through
organisation.access, a hand-over. Without the channel (PostgreSQL without Redis) nothing is kept."""

from __future__ import annotations

import pytest

from agents_app.models import Agent, AgentGrant
from agents_app.selectors import directory
from agentsite.agent import agents as runtime
from agentsite.core import invalidation
from agentsite.core.errors import AppError
from organisation.access import TOPIC as ACCESS_TOPIC
from tests.agents_app.conftest import make

pytestmark = pytest.mark.django_db


@pytest.fixture
def heard(monkeypatch):
    """This process hears every announcement (what a server with Redis, or on SQLite, does)."""
    monkeypatch.setattr(invalidation, "connected", lambda: True)


@pytest.fixture
def deaf(monkeypatch):
    """No channel: PostgreSQL without Redis."""
    monkeypatch.setattr(invalidation, "connected", lambda: False)


def test_a_kept_directory_resolves_without_a_query(heard, owner, owner_client, local, django_assert_num_queries):
    make(owner_client)
    for _ in range(2):  # the first load may make the config row and the agent `default` (whose saves drop it)
        runtime.resolve_now(owner, "agent:helper")
    with django_assert_num_queries(0):
        assert runtime.resolve_now(owner, "agent:helper").slug == "helper"
        assert directory.peek(owner, "agent:helper") is not None
        assert "agent:helper" in runtime.names_now(owner)


def test_a_save_drops_it_and_the_next_resolve_sees_the_change(heard, owner, owner_client, local):
    agent = make(owner_client, instructions="before")
    assert runtime.resolve_now(owner, "agent:helper").settings.system_prompt == "before"
    row = Agent.objects.get(pk=agent["id"])
    row.instructions = "after"
    row.save()  # any save: the API, the admin, a shell
    assert directory._rules is None
    assert runtime.resolve_now(owner, "agent:helper").settings.system_prompt == "after"
    row.delete()
    with pytest.raises(AppError):
        runtime.resolve_now(owner, "agent:helper")


def test_a_rule_change_drops_it(heard, owner, other_user, owner_client, local):
    agent = make(owner_client)
    with pytest.raises(AppError):
        runtime.resolve_now(other_user, "agent:helper")
    shared = owner_client.put(f"/api/agents/{agent['id']}/access", {"visibility": "shared", "grants": [
        {"user": other_user.pk, "role": "viewer"}]}, format="json")
    assert shared.status_code == 200
    assert runtime.resolve_now(other_user, "agent:helper").slug == "helper"
    AgentGrant.objects.filter(resource_id=agent["id"]).delete()  # a grant's own delete signal drops it too
    with pytest.raises(AppError):
        runtime.resolve_now(other_user, "agent:helper")


def test_an_announcement_of_another_process_drops_it(heard, owner, owner_client, local):
    agent = make(owner_client, instructions="kept")
    runtime.resolve_now(owner, "agent:helper")
    # A change this process did not make (another process wrote the row; no signal ran here) ...
    Agent.objects.filter(pk=agent["id"]).update(instructions="theirs")
    assert runtime.resolve_now(owner, "agent:helper").settings.system_prompt == "kept"
    invalidation._apply("agents", None)  # ... is seen once its announcement arrives
    assert runtime.resolve_now(owner, "agent:helper").settings.system_prompt == "theirs"
    Agent.objects.filter(pk=agent["id"]).update(instructions="again")
    invalidation._apply(ACCESS_TOPIC, f"agent:{agent['id']}")  # organisation.access's topic drops it too
    assert runtime.resolve_now(owner, "agent:helper").settings.system_prompt == "again"
    Agent.objects.filter(pk=agent["id"]).update(instructions="not for us")
    invalidation._apply(ACCESS_TOPIC, "collection:1")  # another kind's rule: kept
    assert runtime.resolve_now(owner, "agent:helper").settings.system_prompt == "again"


def test_without_the_channel_nothing_is_kept(deaf, owner, owner_client, local, django_assert_max_num_queries):
    agent = make(owner_client, instructions="one")
    runtime.resolve_now(owner, "agent:helper")
    assert directory._rules is None
    assert directory.peek(owner, "agent:helper") is None  # an async caller then asks the database
    Agent.objects.filter(pk=agent["id"]).update(instructions="two")  # no signal, no announcement
    assert runtime.resolve_now(owner, "agent:helper").settings.system_prompt == "two"


def test_a_pinned_versions_fields_are_read_once_and_dropped_with_the_rest(heard, owner, owner_client, local,
                                                                          django_assert_num_queries):
    agent = make(owner_client, instructions="v1")
    owner_client.patch(f"/api/agents/{agent['id']}", {"instructions": "v2"}, format="json")
    for _ in range(2):
        assert runtime.resolve_now(owner, "agent:helper@1").settings.system_prompt == "v1"
    with django_assert_num_queries(0):
        assert runtime.resolve_now(owner, "agent:helper@1").settings.system_prompt == "v1"
        assert directory.peek(owner, "agent:helper@1").version == 1
    directory.drop()
    assert directory._versions == {}


def test_a_hand_over_changes_whose_rights_read_the_knowledge_at_once(heard, owner, other_user, owner_client, local):
    agent = make(owner_client)
    assert runtime.resolve_now(owner, "agent:helper").settings.knowledge_reader == owner.pk
    owner_client.post(f"/api/agents/{agent['id']}/transfer", {"user": other_user.pk}, format="json")
    assert runtime.resolve_now(other_user, "agent:helper").settings.knowledge_reader == other_user.pk

"""Versions (issue 45, item 2): each save that changes a versioned field is the next version (1 first), a save
that changes nothing makes none, a restore makes a new version equal to the old one; version n of another agent
or a missing n is 404; `agent:<slug>@<n>` runs version n's fields (agentsite.agent.agents.resolve_now)."""

from __future__ import annotations

import pytest

from agents_app.models import Agent, AgentVersion
from agentsite.agent import agents as runtime
from agentsite.core.errors import AppError
from knowledge import services as kb
from tests.agents_app.conftest import error, make

pytestmark = pytest.mark.django_db


def _patch(client, agent, **fields):
    response = client.patch(f"/api/agents/{agent['id']}", fields, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def test_each_save_is_the_next_version_and_a_save_that_changes_nothing_makes_none(owner, owner_client, local):
    agent = make(owner_client, instructions="one")
    assert agent["version"] == 1
    assert _patch(owner_client, agent, instructions="two")["version"] == 2
    assert _patch(owner_client, agent, instructions="two", name="Helper")["version"] == 2  # nothing changed
    assert _patch(owner_client, agent)["version"] == 2  # an empty PATCH
    assert _patch(owner_client, agent, slug="renamed")["version"] == 2  # the slug is no versioned field
    assert _patch(owner_client, agent, temperature=0.1, starters=["Hi"])["version"] == 3
    listed = owner_client.get(f"/api/agents/{agent['id']}/versions").json()
    assert [(item["number"], item["note"], item["author"]["username"]) for item in listed["results"]] == [
        (3, "update", "owner"), (2, "update", "owner"), (1, "create", "owner")]
    assert listed["count"] == 3
    first = owner_client.get(f"/api/agents/{agent['id']}/versions/1").json()
    assert first["number"] == 1 and first["agent"]["instructions"] == "one" and first["agent"]["temperature"] == 0.7
    third = owner_client.get(f"/api/agents/{agent['id']}/versions/3").json()["agent"]
    assert (third["instructions"], third["temperature"], third["starters"]) == ("two", 0.1, ["Hi"])


def test_a_restore_makes_a_new_version_equal_to_the_old_one(owner_client, local):
    agent = make(owner_client, instructions="one", tools=["web_search"])
    _patch(owner_client, agent, instructions="two", tools=[])
    restored = owner_client.post(f"/api/agents/{agent['id']}/versions/1/restore")
    assert restored.status_code == 200, restored.content
    body = restored.json()
    assert (body["version"], body["instructions"], body["tools"]) == (3, "one", ["web_search"])
    again = owner_client.post(f"/api/agents/{agent['id']}/versions/3/restore").json()
    assert again["version"] == 4  # equal to the latest: still a version, so the history says it happened
    notes = [item["note"] for item in owner_client.get(f"/api/agents/{agent['id']}/versions").json()["results"]]
    assert notes == ["restore of version 3", "restore of version 1", "update", "create"]


def test_a_restore_whose_collection_is_gone_is_refused_by_name(owner, owner_client, local):
    handbook = kb.collection_create(owner_id=owner.pk, name="handbook")
    agent = make(owner_client, knowledge=[str(handbook.pk)])
    _patch(owner_client, agent, knowledge=[])
    kb.collection_delete(handbook)
    refused = owner_client.post(f"/api/agents/{agent['id']}/versions/1/restore")
    assert error(refused)[:2] == (400, "invalid") and "knowledge.0" in error(refused)[2], refused.content
    assert Agent.objects.get(pk=agent["id"]).version == 2


def test_version_n_of_another_agent_or_a_missing_n_is_404(owner_client, local):
    first = make(owner_client, slug="first")
    second = make(owner_client, slug="second")
    _patch(owner_client, second, instructions="x")
    _patch(owner_client, second, instructions="y")
    assert AgentVersion.objects.filter(agent_id=second["id"], number=3).exists()
    for path in (f"/api/agents/{first['id']}/versions/3", f"/api/agents/{first['id']}/versions/2"):
        assert error(owner_client.get(path))[:2] == (404, "not_found")
        assert error(owner_client.post(f"{path}/restore"))[:2] == (404, "not_found")


def test_a_pin_resolves_to_that_versions_fields_and_no_pin_to_the_latest(owner, owner_client, local):
    agent = make(owner_client, instructions="old words", model="fast", temperature=0.2, tools=["web_search"])
    _patch(owner_client, agent, instructions="new words", model="local/big", temperature=1.5, tools=[])
    latest = runtime.resolve_now(owner, "agent:helper")
    assert (latest.slug, latest.version, latest.owner_id) == ("helper", 2, owner.pk)
    assert (latest.settings.system_prompt, latest.settings.model, latest.settings.temperature,
            latest.settings.tools, latest.settings.agent) == ("new words", "local/big", 1.5, (), "helper")
    pinned = runtime.resolve_now(owner, "agent:helper@1")
    assert pinned.version == 1
    assert (pinned.settings.system_prompt, pinned.settings.model, pinned.settings.temperature,
            pinned.settings.tools) == ("old words", "fast", 0.2, ("web_search",))
    assert runtime.resolve_now(owner, "agent:helper@2").settings.system_prompt == "new words"
    for name in ("agent:helper@3", "agent:helper@0", "agent:helper@x", "agent:helper@", "agent:helper@-1",
                 "agent:helper@\u0661", "agent:nobody", "agent:Helper", "agent:"):
        with pytest.raises(AppError) as refused:
            runtime.resolve_now(owner, name)
        assert (refused.value.status, refused.value.code) == (404, "model_not_found"), name


def test_a_pin_survives_a_delete_of_nothing_and_goes_with_the_agent(owner, owner_client, local):
    agent = make(owner_client, instructions="v1")
    _patch(owner_client, agent, instructions="v2")
    assert runtime.resolve_now(owner, "agent:helper@1").settings.system_prompt == "v1"
    assert owner_client.delete(f"/api/agents/{agent['id']}").status_code == 204
    assert not AgentVersion.objects.filter(agent_id=agent["id"]).exists()
    for name in ("agent:helper", "agent:helper@1"):
        with pytest.raises(AppError):
            runtime.resolve_now(owner, name)

"""The Django admin's agent pages: each opens; a save there is a version like one through the API (and of the
agent `default`, a change of the config); the agent `default` cannot be deleted there, nor its slug or owner
changed."""

from __future__ import annotations

import pytest
from django.test import Client

from agents_app.models import Agent, AgentVersion
from agents_app.services import default_ensure
from catalogue.models import AgentConfig
from tests.agents_app.conftest import make

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(admin) -> Client:
    client = Client()
    client.force_login(admin)
    return client


def _form(agent: Agent, **changes) -> dict:
    data = {"slug": agent.slug, "name": agent.name, "description": agent.description,
            "instructions": agent.instructions, "model": agent.model, "tools": _json(agent.tools),
            "knowledge": _json(agent.knowledge), "temperature": agent.temperature, "max_tokens": agent.max_tokens,
            "starters": _json(agent.starters), "owner": agent.owner_id or "", "visibility": agent.visibility,
            "grants-TOTAL_FORMS": "0", "grants-INITIAL_FORMS": "0", "grants-MIN_NUM_FORMS": "0",
            "grants-MAX_NUM_FORMS": "1000"}
    data.update(changes)
    return data


def _json(value) -> str:
    import json

    return json.dumps(value)


def test_each_page_opens(staff, owner_client, local):
    agent = make(owner_client)
    version = AgentVersion.objects.get(agent_id=agent["id"], number=1)
    for path in ("/admin/agents_app/agent/", f"/admin/agents_app/agent/{agent['id']}/change/",
                 "/admin/agents_app/agentversion/", f"/admin/agents_app/agentversion/{version.pk}/change/",
                 "/admin/agents_app/agent/?visibility__exact=private", "/admin/agents_app/agent/?q=helper"):
        response = staff.get(path)
        assert response.status_code == 200, (path, response.status_code)


def test_an_admin_save_is_a_version_and_one_that_changes_nothing_is_none(staff, owner_client, local):
    agent = Agent.objects.get(pk=make(owner_client, instructions="one")["id"])
    path = f"/admin/agents_app/agent/{agent.pk}/change/"
    saved = staff.post(path, _form(agent, instructions="two"))
    assert saved.status_code == 302, saved.content.decode()[:2000]
    agent.refresh_from_db()
    assert (agent.instructions, agent.version) == ("two", 2)
    assert AgentVersion.objects.get(agent=agent, number=2).note == "admin edit"
    assert staff.post(path, _form(agent)).status_code == 302
    agent.refresh_from_db()
    assert agent.version == 2


def test_the_default_agent_is_not_deleted_renamed_or_given_an_owner_there(staff, owner):
    default = default_ensure()
    path = f"/admin/agents_app/agent/{default.pk}/"
    assert staff.get(f"{path}delete/").status_code == 403
    assert staff.post(f"{path}delete/", {"post": "yes"}).status_code == 403
    bulk = staff.post("/admin/agents_app/agent/", {"action": "delete_selected", "_selected_action": [default.pk],
                                                   "post": "yes"})
    assert bulk.status_code in (200, 302, 403)  # refused whole, or done without it
    assert Agent.objects.filter(pk=default.pk).exists()
    saved = staff.post(f"{path}change/", _form(default, slug="mine", owner=owner.pk, instructions="Via admin."))
    assert saved.status_code == 302, saved.content.decode()[:2000]
    default.refresh_from_db()
    assert (default.slug, default.owner_id, default.instructions) == ("default", None, "Via admin.")
    assert AgentConfig.objects.get(pk=1).system_prompt == "Via admin."

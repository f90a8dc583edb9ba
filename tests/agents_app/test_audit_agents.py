"""Agents in the audit log (issue 45, item 7): creating, changing, sharing and deleting an agent are events an
admin reads at GET /api/audit, each with the target `agent:<id>`, the actor and what changed by name (never the
instructions' text); a refused change records nothing."""

from __future__ import annotations

import pytest

from tests.conftest import client_for

pytestmark = pytest.mark.django_db

SECRET_INSTRUCTIONS = "Answer from the handbook; the escalation phone is 555-0199."


def _events(admin, **query) -> list[dict]:
    answer = client_for(admin).get("/api/audit", query)
    assert answer.status_code == 200, answer.content
    return list(reversed(answer.json()["results"]))  # oldest first


def test_create_update_share_and_delete_are_audited_with_the_agents_target(owner, other_user, admin):
    client = client_for(owner)
    made = client.post("/api/agents", {"slug": "support", "name": "Support", "instructions": SECRET_INSTRUCTIONS},
                       format="json")
    assert made.status_code == 201, made.content
    agent_id = made.json()["id"]
    target = f"agent:{agent_id}"
    changed = client.patch(f"/api/agents/{agent_id}", {"instructions": "Be brief.", "temperature": 0.2},
                           format="json")
    assert changed.status_code == 200, changed.content
    shared = client.put(f"/api/agents/{agent_id}/access", {"visibility": "shared", "grants": [
        {"user": other_user.pk, "role": "viewer"}]}, format="json")
    assert shared.status_code == 200, shared.content
    # A viewer may not change it, nor delete it: refused, and nothing recorded for it.
    viewer = client_for(other_user)
    assert viewer.patch(f"/api/agents/{agent_id}", {"name": "Mine"}, format="json").status_code == 403
    assert viewer.delete(f"/api/agents/{agent_id}").status_code == 403
    assert client.delete(f"/api/agents/{agent_id}").status_code == 204

    events = [event for event in _events(admin) if event["target"] == target]
    assert [event["action"] for event in events] == ["agent.create", "agent.update", "access.change", "agent.delete"]
    assert all(event["actor"] == "owner" and event["actor_id"] == owner.pk and event["outcome"] == "success"
               for event in events)
    create, update, access, delete = (event["details"] for event in events)
    assert create["slug"] == "support" and {"slug", "name", "instructions"} <= set(create["fields"])
    assert update["slug"] == "support" and update["fields"] == ["instructions", "temperature"]
    assert update["version"] == 2
    assert access["before"] == {"visibility": "private", "grants": []}
    assert access["after"] == {"visibility": "shared", "grants": [
        {"user": other_user.pk, "name": "other", "role": "viewer"}]}
    assert delete == {"slug": "support"}
    assert all(SECRET_INSTRUCTIONS not in str(event) and "Be brief" not in str(event) for event in events)
    # The action filter finds them: the agent's own events by their prefix.
    assert [event["action"] for event in _events(admin, action="agent.") if event["target"] == target] == [
        "agent.create", "agent.update", "agent.delete"]


def test_the_audit_log_is_for_admins_only(owner, admin):
    client_for(owner).post("/api/agents", {"slug": "mine", "name": "Mine"}, format="json")
    assert client_for(owner).get("/api/audit").status_code == 403
    assert [event["action"] for event in _events(admin, action="agent.create")] == ["agent.create"]

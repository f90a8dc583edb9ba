"""A hand-over (`POST <resource>/:id/transfer {user}`) of a collection, a workflow and an agent is one audit event
`resource.transfer` naming the resource, the caller, and the owner before and after; handing a resource to its
owner changes nothing and records nothing."""

from __future__ import annotations

import pytest

from accounts.models import AuditEvent
from agents_app.services import agent_create
from knowledge.services import collection_create
from tests.conftest import client_for
from workflows.models import Workflow

pytestmark = pytest.mark.django_db(transaction=True)

SIMPLE = {"nodes": [{"id": "start", "name": "start", "type": "input", "config": {}},
                    {"id": "out", "name": "out", "type": "output", "config": {}}],
          "edges": [{"from": "start", "to": "out"}]}


def _collection(owner) -> tuple[str, str]:
    return "collection", f"/api/kb/collections/{collection_create(owner_id=owner.pk, name='handbook').pk}"


def _workflow(owner) -> tuple[str, str]:
    created = client_for(owner).post("/api/workflows", {"name": "report", **SIMPLE}, format="json")
    assert created.status_code == 201, created.content
    return "workflow", f"/api/workflows/{created.json()['id']}"


def _agent(owner) -> tuple[str, str]:
    return "agent", f"/api/agents/{agent_create(owner=owner, data={'slug': 'helper', 'name': 'Helper'}).pk}"


@pytest.mark.parametrize("make", [_collection, _workflow, _agent], ids=["collection", "workflow", "agent"])
@pytest.mark.parametrize("by_admin", [False, True], ids=["by-the-owner", "by-an-admin"])
def test_a_transfer_is_audited_with_the_owner_before_and_after(make, by_admin, owner, other_user, admin):
    kind, path = make(owner)
    actor = admin if by_admin else owner
    moved = client_for(actor).post(f"{path}/transfer", {"user": other_user.pk}, format="json")
    assert moved.status_code == 200, moved.content
    assert moved.json() == {"owner": {"id": other_user.pk, "username": other_user.username}}
    [event] = AuditEvent.objects.filter(action="resource.transfer")
    assert (event.target, event.actor_id, event.outcome) == (f"{kind}:{path.rsplit('/', 1)[1]}", actor.pk, "success")
    assert event.details == {"before": {"owner": owner.pk}, "after": {"owner": other_user.pk}}


def test_handing_a_resource_to_its_owner_records_nothing(owner):
    kind, path = _workflow(owner)
    again = client_for(owner).post(f"{path}/transfer", {"user": owner.pk}, format="json")
    assert again.status_code == 200, again.content
    assert Workflow.objects.get(pk=path.rsplit("/", 1)[1]).owner_id == owner.pk
    assert not AuditEvent.objects.filter(action="resource.transfer").exists()

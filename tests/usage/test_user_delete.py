"""Deleting a user (issue 44, item 3): refused with what they own until it is handed over (`?transfer_to=`, all
or nothing; workflows, collections), audited with what moved; and a deactivated owner's shared workflow still
runs for its grantees.
"""

from __future__ import annotations

import pytest

from accounts.models import AuditEvent
from knowledge import services as kb
from knowledge.models import Collection
from organisation.models import Group, Membership
from tests.conftest import client_for
from workflows.models import Workflow, WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True)

MOON = "The Moon orbits the Earth every 27 days. Astronauts of Apollo 11 first landed on the Moon in 1969."

SIMPLE = {"nodes": [{"id": "start", "name": "start", "type": "input", "config": {}},
                    {"id": "out", "name": "out", "type": "output", "config": {}}],
          "edges": [{"from": "start", "to": "out"}]}


@pytest.fixture
def people(django_user_model, admin):
    users = {name: django_user_model.objects.create_user(name, password="x-correct-horse-1")
             for name in ("alice", "bob", "erin")}
    return {**users, "admin": admin}


def make(user, name: str) -> dict:
    created = client_for(user).post("/api/workflows", {"name": name, **SIMPLE}, format="json")
    assert created.status_code == 201, created.content
    return created.json()


def code(response) -> str:
    return response.json()["error"]["code"]


def test_a_user_who_owns_a_workflow_is_not_deleted_until_it_is_handed_over(people):
    workflow = make(people["alice"], "report")
    alice_id = people["alice"].pk
    admin = client_for(people["admin"])
    refused = admin.delete(f"/api/users/{alice_id}")
    assert (refused.status_code, code(refused)) == (409, "conflict")
    assert refused.json()["error"]["details"]["owned"] == {"workflow": [{"id": workflow["id"], "name": "report"}]}
    assert Workflow.objects.filter(pk=workflow["id"], owner_id=alice_id).exists()

    deleted = admin.delete(f"/api/users/{alice_id}?transfer_to={people['erin'].pk}")
    assert deleted.status_code == 204, deleted.content
    assert not type(people["alice"]).objects.filter(pk=alice_id).exists()
    assert Workflow.objects.get(pk=workflow["id"]).owner_id == people["erin"].pk
    event = AuditEvent.objects.get(action="user.delete")
    assert event.target == f"user:{alice_id}" and event.actor_id == people["admin"].pk
    assert event.details == {"username": "alice", "transferred_to": people["erin"].pk,
                             "transferred": {"workflow": [workflow["id"]]}}
    assert AuditEvent.objects.filter(action="resource.transfer", target=f"workflow:{workflow['id']}").exists()


def test_a_user_who_owns_only_a_collection_is_not_deleted_until_it_is_handed_over(people):
    erin, bob = people["erin"], people["bob"]
    handbook = kb.collection_create(owner_id=erin.pk, name="handbook")
    kb.document_ingest(owner_id=erin.pk, filename="moon.txt", content=MOON, collection=handbook)
    kb.collection_create(owner_id=bob.pk, name="handbook")
    admin = client_for(people["admin"])
    refused = admin.delete(f"/api/users/{erin.pk}")
    assert (refused.status_code, code(refused)) == (409, "conflict")
    assert refused.json()["error"]["details"]["owned"] == {"collection": [{"id": str(handbook.pk), "name": "handbook"}]}
    assert Collection.objects.get(pk=handbook.pk).owner_id == erin.pk

    erin_id = erin.pk
    assert admin.delete(f"/api/users/{erin_id}?transfer_to={bob.pk}").status_code == 204
    assert not type(erin).objects.filter(pk=erin_id).exists()
    moved = Collection.objects.get(pk=handbook.pk)
    assert (moved.owner_id, moved.name) == (bob.pk, "handbook (from erin)")  # bob has a "handbook" already
    found = client_for(bob).post("/api/kb/search", {"query": "Apollo astronauts", "collections": [str(moved.pk)]},
                                 format="json")
    assert [hit["document"]["filename"] for hit in found.json()["results"]] == ["moon.txt"]
    assert AuditEvent.objects.get(action="user.delete").details["transferred"] == {"collection": [str(handbook.pk)]}
    assert AuditEvent.objects.get(action="resource.transfer").details == {
        "before": {"owner": erin_id}, "after": {"owner": bob.pk}}


def test_a_name_the_new_owner_holds_refuses_the_whole_delete_and_moves_nothing(people):
    first, clash = make(people["alice"], "first"), make(people["alice"], "report")
    make(people["erin"], "report")
    answer = client_for(people["admin"]).delete(f"/api/users/{people['alice'].pk}?transfer_to={people['erin'].pk}")
    assert (answer.status_code, code(answer)) == (409, "conflict")
    assert answer.json()["error"]["details"]["workflow"] == "report"
    assert set(Workflow.objects.filter(owner=people["alice"]).values_list("pk", flat=True)) == {
        Workflow._meta.pk.to_python(first["id"]), Workflow._meta.pk.to_python(clash["id"])}
    assert type(people["alice"]).objects.filter(pk=people["alice"].pk).exists()
    assert not AuditEvent.objects.filter(action="user.delete").exists()


def test_a_user_owning_nothing_is_deleted_with_their_runs(people):
    workflow = make(people["alice"], "report")
    run = client_for(people["bob"]).post(f"/api/workflows/{workflow['id']}/run", {"input": "x"}, format="json")
    assert run.status_code == 404  # not shared yet
    bob_id = people["bob"].pk
    assert client_for(people["admin"]).delete(f"/api/users/{bob_id}").status_code == 204
    assert not type(people["bob"]).objects.filter(pk=bob_id).exists()
    assert AuditEvent.objects.get(action="user.delete").details["transferred"] == {}


def test_deleting_refuses_yourself_users_and_bad_heirs(people, django_user_model):
    admin, alice = client_for(people["admin"]), people["alice"]
    make(alice, "report")
    mine = admin.delete(f"/api/users/{people['admin'].pk}")
    assert (mine.status_code, code(mine)) == (409, "conflict")
    assert code(client_for(people["bob"]).delete(f"/api/users/{alice.pk}")) == "forbidden"
    assert code(admin.delete("/api/users/999999")) == "not_found"
    people["erin"].is_active = False
    people["erin"].save()
    for heir in ("999999", str(people["erin"].pk), str(alice.pk), "abc", "-1", "281959413266386878464"):
        answer = admin.delete(f"/api/users/{alice.pk}?transfer_to={heir}")
        assert (answer.status_code, code(answer)) == (400, "invalid"), heir
    # As the schema says (schemathesis holds every answer to it).
    responses = admin.get("/api/schema?format=json").json()["paths"]["/api/users/{user_id}"]["delete"]["responses"]
    assert {"204", "400", "409"} <= set(responses)
    assert django_user_model.objects.filter(pk=alice.pk).exists()
    assert django_user_model.objects.filter(pk=people["admin"].pk).exists()


def test_a_deactivated_owners_shared_workflow_still_runs_for_its_grantees(people):
    workflow = make(people["alice"], "report")
    readers = Group.objects.create(name="readers")
    Membership.objects.create(group=readers, user=people["bob"])
    assert client_for(people["alice"]).put(f"/api/workflows/{workflow['id']}/access", {
        "visibility": "shared", "grants": [{"group": readers.pk, "role": "viewer"}]}, format="json").status_code == 200
    deactivated = client_for(people["admin"]).patch(f"/api/users/{people['alice'].pk}", {"is_active": False},
                                                    format="json")
    assert deactivated.status_code == 200 and deactivated.json()["is_active"] is False
    bob = client_for(people["bob"])
    assert bob.get(f"/api/workflows/{workflow['id']}").json()["owner"]["username"] == "alice"
    ran = bob.post(f"/api/workflows/{workflow['id']}/run", {"input": "still here"}, format="json")
    assert ran.status_code == 200 and ran.json()["output"] == "still here", ran.content
    assert WorkflowRun.objects.get(pk=ran.json()["id"]).owner_id == people["bob"].pk

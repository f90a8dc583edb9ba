"""Groups and their members over /api/groups: who may read, create, change and delete them, the membership roles,
the audit trail, and /api/auth/me's groups."""

from __future__ import annotations

import pytest

from accounts.models import AuditEvent
from organisation.models import Group, Membership
from tests.conftest import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def team(django_user_model, admin):
    alice = django_user_model.objects.create_user("alice", password="x-correct-horse-1")
    bob = django_user_model.objects.create_user("bob", password="x-correct-horse-1")
    carol = django_user_model.objects.create_user("carol", password="x-correct-horse-1")
    created = client_for(admin).post("/api/groups", {"name": "support", "description": "first line"}, format="json")
    assert created.status_code == 201, created.content
    group_id = created.json()["id"]
    admin_client = client_for(admin)
    assert admin_client.post(f"/api/groups/{group_id}/members", {"user": alice.pk, "role": "manager"},
                             format="json").status_code == 201
    assert admin_client.post(f"/api/groups/{group_id}/members", {"user": bob.pk}, format="json").status_code == 201
    return {"id": group_id, "alice": alice, "bob": bob, "carol": carol, "admin": admin}


def code(response) -> str:
    return response.json()["error"]["code"]


def test_a_group_answers_its_fields_and_counts_its_members(team):
    group = client_for(team["bob"]).get(f"/api/groups/{team['id']}").json()
    assert group == {"id": team["id"], "name": "support", "description": "first line", "members_count": 2,
                     "models": None, "source": "manual", "created_at": group["created_at"]}


def test_members_read_their_groups_and_others_get_404(team):
    assert [g["name"] for g in client_for(team["bob"]).get("/api/groups").json()] == ["support"]
    carol = client_for(team["carol"])
    assert carol.get("/api/groups").json() == []
    for path in (f"/api/groups/{team['id']}", f"/api/groups/{team['id']}/members"):
        response = carol.get(path)
        assert response.status_code == 404 and code(response) == "not_found"
    assert client_for(team["admin"]).get(f"/api/groups/{team['id']}").status_code == 200


def test_only_admins_create_change_and_delete_groups(team):
    alice = client_for(team["alice"])
    assert code(alice.post("/api/groups", {"name": "other"}, format="json")) == "forbidden"
    assert code(alice.patch(f"/api/groups/{team['id']}", {"description": "mine"}, format="json")) == "forbidden"
    assert code(alice.delete(f"/api/groups/{team['id']}")) == "forbidden"
    assert Group.objects.get(pk=team["id"]).description == "first line"


def test_a_manager_manages_members_and_a_member_does_not(team):
    alice, bob = client_for(team["alice"]), client_for(team["bob"])
    carol_id = team["carol"].pk
    refused = bob.post(f"/api/groups/{team['id']}/members", {"user": carol_id}, format="json")
    assert refused.status_code == 403 and code(refused) == "forbidden"
    assert alice.post(f"/api/groups/{team['id']}/members", {"user": carol_id}, format="json").status_code == 201
    promoted = alice.patch(f"/api/groups/{team['id']}/members/{carol_id}", {"role": "manager"}, format="json")
    assert promoted.status_code == 200 and promoted.json() == {"user": {"id": carol_id, "username": "carol"},
                                                                "role": "manager"}
    assert bob.delete(f"/api/groups/{team['id']}/members/{carol_id}").status_code == 403
    assert alice.delete(f"/api/groups/{team['id']}/members/{carol_id}").status_code == 204
    members = alice.get(f"/api/groups/{team['id']}/members").json()
    assert members == [{"user": {"id": team["alice"].pk, "username": "alice"}, "role": "manager"},
                       {"user": {"id": team["bob"].pk, "username": "bob"}, "role": "member"}]


def test_membership_errors_name_what_to_fix(team):
    admin = client_for(team["admin"])
    again = admin.post(f"/api/groups/{team['id']}/members", {"user": team["bob"].pk}, format="json")
    assert again.status_code == 409 and code(again) == "conflict"
    nobody = admin.post(f"/api/groups/{team['id']}/members", {"user": 999999}, format="json")
    assert nobody.status_code == 400 and "user" in nobody.json()["error"]["details"]
    role = admin.post(f"/api/groups/{team['id']}/members", {"user": team["carol"].pk, "role": "owner"}, format="json")
    assert role.status_code == 400 and "role" in role.json()["error"]["details"]
    missing = admin.delete(f"/api/groups/{team['id']}/members/{team['carol'].pk}")
    assert missing.status_code == 404


@pytest.mark.parametrize(("name", "ok"), [("a", True), ("x" * 64, True), ("x" * 65, False), ("", False),
                                          ("team one", False), ("team.one", False), ("ops_2-b", True)])
def test_group_names_are_1_to_64_letters_digits_dash_underscore(admin, name, ok):
    response = client_for(admin).post("/api/groups", {"name": name}, format="json")
    assert response.status_code == (201 if ok else 400), response.content


def test_a_taken_name_is_a_conflict(team):
    admin = client_for(team["admin"])
    assert code(admin.post("/api/groups", {"name": "support"}, format="json")) == "conflict"
    other = admin.post("/api/groups", {"name": "ops"}, format="json").json()
    assert code(admin.patch(f"/api/groups/{other['id']}", {"name": "support"}, format="json")) == "conflict"


def test_me_lists_the_callers_groups_and_a_removal_shows_on_the_next_request(team):
    bob = client_for(team["bob"])
    assert bob.get("/api/auth/me").json()["groups"] == [{"id": team["id"], "name": "support", "role": "member"}]
    assert client_for(team["alice"]).delete(f"/api/groups/{team['id']}/members/{team['bob'].pk}").status_code == 204
    assert bob.get("/api/auth/me").json()["groups"] == []


def test_group_and_membership_changes_are_audited_with_before_and_after(team):
    admin = client_for(team["admin"])
    admin.patch(f"/api/groups/{team['id']}", {"description": "second line"}, format="json")
    client_for(team["alice"]).patch(f"/api/groups/{team['id']}/members/{team['bob'].pk}", {"role": "manager"},
                                    format="json")
    update = AuditEvent.objects.get(action="group.update")
    assert update.details["before"]["description"] == "first line"
    assert update.details["after"]["description"] == "second line"
    role = AuditEvent.objects.get(action="group.member_update")
    assert role.actor_name == "alice" and role.details == {"user": team["bob"].pk, "before": {"role": "member"},
                                                      "after": {"role": "manager"}}
    assert AuditEvent.objects.filter(action="group.member_add").count() == 2


def test_deleting_a_group_removes_its_memberships(team):
    assert client_for(team["admin"]).delete(f"/api/groups/{team['id']}").status_code == 204
    assert not Membership.objects.exists()
    assert AuditEvent.objects.get(action="group.delete").details["before"]["members"]

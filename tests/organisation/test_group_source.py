"""A group's `source` over /api/groups: answered on every read, set by admins on create and change (manual or
oidc, anything else 400 naming the field), refused to managers and members like every other group change, and
audited with the before and after."""

from __future__ import annotations

import pytest

from accounts.models import AuditEvent
from organisation.models import Group, Membership
from tests.conftest import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def team(django_user_model, admin):
    """A manual group `support` with alice as its manager and bob as a member; carol in no group."""
    group = Group.objects.create(name="support")
    alice = django_user_model.objects.create_user("alice", password="x-correct-horse-1")
    bob = django_user_model.objects.create_user("bob", password="x-correct-horse-1")
    carol = django_user_model.objects.create_user("carol", password="x-correct-horse-1")
    Membership.objects.create(group=group, user=alice, role="manager")
    Membership.objects.create(group=group, user=bob)
    return {"group": group, "alice": alice, "bob": bob, "carol": carol, "admin": admin}


def error(response) -> tuple[str, dict]:
    body = response.json()["error"]
    return body["code"], body.get("details") or {}


def test_every_read_answers_the_source_and_manual_is_the_default(team):
    admin = client_for(team["admin"])
    made = admin.post("/api/groups", {"name": "plain"}, format="json")
    assert made.status_code == 201 and made.json()["source"] == "manual"
    assert Group.objects.get(name="plain").source == "manual"
    Group.objects.create(name="from-idp", source="oidc")
    assert {g["name"]: g["source"] for g in admin.get("/api/groups").json()} == {
        "from-idp": "oidc", "plain": "manual", "support": "manual"}
    assert client_for(team["bob"]).get(f"/api/groups/{team['group'].pk}").json()["source"] == "manual"


def test_an_admin_sets_the_source_on_create_and_on_change_and_it_is_audited(team):
    admin = client_for(team["admin"])
    made = admin.post("/api/groups", {"name": "eng", "source": "oidc"}, format="json")
    assert made.status_code == 201 and made.json()["source"] == "oidc"
    group_id = made.json()["id"]
    assert Group.objects.get(pk=group_id).source == "oidc"
    created = AuditEvent.objects.get(action="group.create", target=f"group:{group_id}")
    assert created.details["after"]["source"] == "oidc"
    changed = admin.patch(f"/api/groups/{group_id}", {"source": "manual"}, format="json")
    assert changed.status_code == 200 and changed.json()["source"] == "manual"
    assert Group.objects.get(pk=group_id).source == "manual"
    update = AuditEvent.objects.get(action="group.update", target=f"group:{group_id}")
    assert (update.details["before"]["source"], update.details["after"]["source"]) == ("oidc", "manual")
    # A change that leaves the source out keeps it.
    assert admin.patch(f"/api/groups/{group_id}", {"description": "x"}, format="json").json()["source"] == "manual"


@pytest.mark.parametrize("value", ["OIDC", "ldap", "", None, 1, ["oidc"], " oidc"])
def test_a_source_other_than_manual_or_oidc_is_400_naming_the_field(team, value):
    admin = client_for(team["admin"])
    made = admin.post("/api/groups", {"name": "eng", "source": value}, format="json")
    assert made.status_code == 400 and "source" in error(made)[1], made.content
    assert not Group.objects.filter(name="eng").exists()
    changed = admin.patch(f"/api/groups/{team['group'].pk}", {"source": value}, format="json")
    assert changed.status_code == 400 and "source" in error(changed)[1], changed.content
    assert Group.objects.get(pk=team["group"].pk).source == "manual"


@pytest.mark.parametrize("who", ["alice", "bob"])
def test_managers_and_members_cannot_set_the_source(team, who):
    client = client_for(team[who])
    refused = client.patch(f"/api/groups/{team['group'].pk}", {"source": "oidc"}, format="json")
    assert refused.status_code == 403 and error(refused)[0] == "forbidden"
    created = client.post("/api/groups", {"name": "mine", "source": "oidc"}, format="json")
    assert created.status_code == 403 and error(created)[0] == "forbidden"
    assert Group.objects.get(pk=team["group"].pk).source == "manual" and not Group.objects.filter(name="mine").exists()


def test_a_user_outside_the_group_gets_404_for_its_source_change(team):
    refused = client_for(team["carol"]).patch(f"/api/groups/{team['group'].pk}", {"source": "oidc"}, format="json")
    assert refused.status_code == 404 and error(refused)[0] == "not_found"
    assert Group.objects.get(pk=team["group"].pk).source == "manual"


def test_the_schema_documents_the_source_and_its_choices(admin):
    schema = client_for(admin).get("/api/schema", {"format": "json"}).json()
    parts = schema["components"]["schemas"]
    for name in ("Group", "GroupInputRequest", "PatchedGroupPatchRequest"):
        source = parts[name]["properties"]["source"]
        choices = parts[source["allOf"][0]["$ref"].rsplit("/", 1)[1]] if "allOf" in source else source
        assert choices["enum"] == ["manual", "oidc"] and "groups claim" in source["description"], (name, source)

"""Who may do what to an agent (issue 45, item 1; organisation.policy): the owner everything; an editor reads,
changes and restores it, and reads its rule, but does not delete, share or hand it over; a viewer reads it and
its versions; an outsider gets 404 everywhere, as for an agent that does not exist. Listings: a user sees their
own, everyone's and those granted to them (or a group of theirs); an admin's list is the same (they act on any
agent by its id). A hand-over (POST
.../transfer, or a removed user's `transfer_to`) moves the agent; deleting its owner otherwise deletes it."""

from __future__ import annotations

import pytest

from agents_app.models import Agent
from agentsite.agent import agents as runtime
from agentsite.core.errors import AppError
from organisation.models import Membership
from tests.agents_app.conftest import error, make
from tests.conftest import client_for

pytestmark = pytest.mark.django_db

ROUTES = {  # name -> (method, path template, body)
    "get": ("get", "/api/agents/{pk}", None),
    "patch": ("patch", "/api/agents/{pk}", {"description": "changed"}),
    "versions": ("get", "/api/agents/{pk}/versions", None),
    "version": ("get", "/api/agents/{pk}/versions/1", None),
    "restore": ("post", "/api/agents/{pk}/versions/1/restore", {}),
    "access": ("get", "/api/agents/{pk}/access", None),
    "share": ("put", "/api/agents/{pk}/access", "rule"),
    "transfer": ("post", "/api/agents/{pk}/transfer", "transfer"),
    "delete": ("delete", "/api/agents/{pk}", None),
}
ALLOWED = {
    "owner": set(ROUTES),
    "admin": set(ROUTES),
    "editor": {"get", "patch", "versions", "version", "restore", "access"},
    "viewer": {"get", "versions", "version"},
    "outsider": set(),
}


@pytest.mark.parametrize("who", list(ALLOWED))
@pytest.mark.parametrize("route", list(ROUTES))
def test_each_role_gets_what_the_rule_says(people, admin, who, route):
    people["admin"] = admin
    method, template, body = ROUTES[route]
    agent = people["agent"]
    if body == "rule":
        body = {"visibility": "shared", "grants": [{"user": people["editor"].pk, "role": "editor"},
                                                   {"group": people["team"].pk, "role": "viewer"}]}
    elif body == "transfer":
        body = {"user": people["editor"].pk}
    response = getattr(client_for(people[who]), method)(template.format(pk=agent["id"]), body, format="json")
    if route in ALLOWED[who]:
        assert response.status_code in (200, 204), (who, route, response.content)
    elif who == "outsider":
        assert error(response)[:2] == (404, "not_found"), (who, route, response.content)
    else:
        assert error(response)[:2] == (403, "forbidden"), (who, route, response.content)


def test_a_listing_holds_own_everyones_and_granted_agents_and_an_admin_sees_all(people, admin, other_user):
    owner, viewer, outsider = people["owner"], people["viewer"], people["outsider"]
    make(client_for(owner), slug="mine-private", name="Private")
    public = make(client_for(other_user), slug="theirs-public", name="Public")
    client_for(other_user).put(f"/api/agents/{public['id']}/access", {"visibility": "everyone"}, format="json")
    make(client_for(other_user), slug="theirs-private", name="Theirs")

    def slugs(user) -> dict[str, str]:
        listed = client_for(user).get("/api/agents").json()
        return {item["slug"]: item["access"]["role"] for item in listed["results"]}

    assert slugs(owner) == {"default": "viewer", "mine-private": "owner", "shared-one": "owner",
                            "theirs-public": "viewer"}
    assert slugs(viewer) == {"default": "viewer", "shared-one": "viewer", "theirs-public": "viewer"}
    assert slugs(people["editor"]) == {"default": "viewer", "shared-one": "editor", "theirs-public": "viewer"}
    assert slugs(outsider) == {"default": "viewer", "theirs-public": "viewer"}
    # An admin's list is what is theirs or shared with them, as anyone's (they act on any agent by its id).
    assert slugs(admin) == {"default": "owner", "theirs-public": "owner"}
    private = Agent.objects.get(slug="theirs-private")
    assert client_for(admin).get(f"/api/agents/{private.pk}").json()["access"]["role"] == "owner"
    assert runtime.resolve_now(admin, "agent:theirs-private").slug == "theirs-private"
    assert runtime.names_now(admin) == ["agent:default", "agent:theirs-public"]
    # The runtime's names agree with the listing.
    assert runtime.names_now(viewer) == ["agent:default", "agent:shared-one", "agent:theirs-public"]
    assert runtime.names_now(outsider) == ["agent:default", "agent:theirs-public"]


def test_a_removed_member_loses_the_agent_on_the_next_resolve(people):
    viewer = people["viewer"]
    assert runtime.resolve_now(viewer, "agent:shared-one").slug == "shared-one"
    Membership.objects.filter(user=viewer).delete()
    with pytest.raises(AppError) as refused:
        runtime.resolve_now(viewer, "agent:shared-one")
    assert refused.value.code == "model_not_found"
    assert error(client_for(viewer).get(f"/api/agents/{people['agent']['id']}"))[:2] == (404, "not_found")


def test_a_transfer_moves_the_agent_and_its_knowledge_reader(people):
    owner, outsider, agent = people["owner"], people["outsider"], people["agent"]
    before = runtime.resolve_now(owner, "agent:shared-one")
    assert before.settings.knowledge_reader == owner.pk
    moved = client_for(owner).post(f"/api/agents/{agent['id']}/transfer", {"user": outsider.pk}, format="json")
    assert moved.status_code == 200 and moved.json()["owner"]["id"] == outsider.pk, moved.content
    after = runtime.resolve_now(outsider, "agent:shared-one")
    assert (after.owner_id, after.settings.knowledge_reader) == (outsider.pk, outsider.pk)
    shown = client_for(outsider).get(f"/api/agents/{agent['id']}").json()
    assert shown["owner"] == {"id": outsider.pk, "username": "outsider"} and shown["access"]["role"] == "owner"
    # The former owner holds no grant: the agent is `shared` with the editor and the group only.
    assert error(client_for(owner).get(f"/api/agents/{agent['id']}"))[:2] == (404, "not_found")


def test_a_removed_user_hands_agents_over_or_is_refused_naming_them(people, admin):
    owner, editor, agent = people["owner"], people["editor"], people["agent"]
    refused = client_for(admin).delete(f"/api/users/{owner.pk}")
    status, code, details = error(refused)
    assert (status, code) == (409, "conflict") and details["owned"]["agent"] == [{"id": str(agent["id"]),
                                                                                  "name": "shared-one"}]
    removed = client_for(admin).delete(f"/api/users/{owner.pk}?transfer_to={editor.pk}")
    assert removed.status_code == 204, removed.content
    assert Agent.objects.get(pk=agent["id"]).owner_id == editor.pk
    assert runtime.resolve_now(editor, "agent:shared-one").owner_id == editor.pk


def test_deleting_the_owner_by_other_means_deletes_their_agents_as_their_workflows(owner, owner_client, local):
    from workflows.models import Workflow

    agent = make(owner_client)
    assert Agent._meta.get_field("owner").remote_field.on_delete is \
        Workflow._meta.get_field("owner").remote_field.on_delete
    owner.delete()
    assert not Agent.objects.filter(pk=agent["id"]).exists()
    with pytest.raises(AppError):
        runtime.resolve_now(None, "agent:helper")


def test_an_editor_cannot_add_a_collection_of_the_owners_they_may_not_read(people):
    from knowledge import services as kb

    owner, editor, agent = people["owner"], people["editor"], people["agent"]
    private = kb.collection_create(owner_id=owner.pk, name="owner only")
    theirs = kb.collection_create(owner_id=editor.pk, name="editor only")
    path = f"/api/agents/{agent['id']}"
    refused = client_for(editor).patch(path, {"knowledge": [str(private.pk)]}, format="json")
    assert error(refused)[:2] == (400, "invalid") and "knowledge.0" in error(refused)[2], refused.content
    refused = client_for(editor).patch(path, {"knowledge": [str(theirs.pk)]}, format="json")  # the owner cannot
    assert error(refused)[:2] == (400, "invalid") and "knowledge.0" in error(refused)[2], refused.content
    assert client_for(owner).patch(path, {"knowledge": [str(private.pk)]}, format="json").status_code == 200
    # What the agent holds already, the editor keeps (or drops) without reading it.
    kept = client_for(editor).patch(path, {"knowledge": [str(private.pk)], "name": "Renamed"}, format="json")
    assert kept.status_code == 200 and kept.json()["knowledge"] == [str(private.pk)], kept.content
    dropped = client_for(editor).patch(path, {"knowledge": []}, format="json")
    assert dropped.status_code == 200 and dropped.json()["knowledge"] == []
    restored = client_for(editor).post(f"{path}/versions/{kept.json()['version']}/restore")
    assert error(restored)[:2] == (400, "invalid") and "knowledge.0" in error(restored)[2], restored.content


def test_a_listing_costs_the_same_queries_whatever_it_lists(people):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    owner, viewer, team = people["owner"], people["viewer"], people["team"]
    client = client_for(viewer)
    client.get("/api/agents")  # warm: the token's user, the default agent

    def cost() -> tuple[int, list[str]]:
        with CaptureQueriesContext(connection) as queries:
            listed = client.get("/api/agents").json()["results"]
        return len(queries), sorted(item["access"]["role"] for item in listed)

    few = cost()
    for number in range(6):
        agent = make(client_for(owner), slug=f"more-{number}", name=f"More {number}")
        rule = client_for(owner).put(f"/api/agents/{agent['id']}/access", {"visibility": "shared", "grants": [
            {"group": team.pk, "role": "editor" if number % 2 else "viewer"}]}, format="json")
        assert rule.status_code == 200
    many = cost()
    assert many[1] == ["editor"] * 3 + ["viewer"] * 5
    assert many[0] == few[0], (few, many)

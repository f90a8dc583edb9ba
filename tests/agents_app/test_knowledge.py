"""Knowledge isolation (issue 45, item 5), against knowledge/context.py with real collections and documents: a
viewer's run of a shared agent searches the agent's collections with the agent owner's read rights, and never
the viewer's own collections unless the agent names them; the agent `default` searches the caller's personal
collection; a collection the owner can no longer read, or that is gone, gives nothing (the others still do); a
deactivated owner's agent keeps searching what the owner could read for its viewers."""

from __future__ import annotations

import pytest

from agentsite.agent import agents as runtime
from agentsite.agent.context import ContextRequest
from knowledge import services as kb
from knowledge.context import knowledge_context_now
from knowledge.models import Collection
from organisation.policy import USE, can, visible_q
from tests.agents_app.conftest import make
from tests.conftest import client_for

# Documents reach the search index once committed.
pytestmark = pytest.mark.django_db(transaction=True)

MOON = "The Moon orbits the Earth every 27 days. Astronauts of Apollo 11 first landed on the Moon in 1969."
BREAD = "To bake bread, mix flour, water, yeast and salt. Knead the dough, let it rise, then bake it hot."
TIDES = "Tides rise and fall twice a day, pulled by the Moon and the Sun; spring tides follow a full Moon."
QUERY = "Moon astronauts bread dough tides"


def _files(user, name: str, query: str = QUERY) -> list[str]:
    """The files of the passages a run of agent `name` by `user` gets as context."""
    settings = runtime.resolve_now(user, name).settings
    block = knowledge_context_now(ContextRequest(None if user is None else user.pk, query, settings))
    return [] if block is None else sorted(source["document"]["filename"] for source in block.sources)


@pytest.fixture
def world(owner, other_user, django_user_model, local):
    """owner: a private collection `handbook` (moon.txt) and their personal one (owner-notes.txt); other_user
    (the viewer of the agent): their personal collection (bread.txt), private; a third user's collection
    `tides` (tides.txt), shared with the owner. The agent `helper` of owner names handbook and tides and is
    shared with other_user as a viewer."""
    third = django_user_model.objects.create_user(username="third", password="x-pass-1234567")
    handbook = kb.collection_create(owner_id=owner.pk, name="handbook")
    kb.document_ingest(owner_id=owner.pk, filename="moon.txt", content=MOON, collection=handbook)
    kb.document_ingest(owner_id=owner.pk, filename="owner-notes.txt", content=MOON + " Notes.")
    kb.document_ingest(owner_id=other_user.pk, filename="bread.txt", content=BREAD)
    tides = kb.collection_create(owner_id=third.pk, name="tides")
    kb.document_ingest(owner_id=third.pk, filename="tides.txt", content=TIDES, collection=tides)
    shared = client_for(third).put(f"/api/kb/collections/{tides.pk}/access", {"visibility": "shared", "grants": [
        {"user": owner.pk, "role": "viewer"}]}, format="json")
    assert shared.status_code == 200, shared.content
    agent = make(client_for(owner), knowledge=[str(handbook.pk), str(tides.pk)])
    rule = client_for(owner).put(f"/api/agents/{agent['id']}/access", {"visibility": "shared", "grants": [
        {"user": other_user.pk, "role": "viewer"}]}, format="json")
    assert rule.status_code == 200, rule.content
    return {"third": third, "handbook": handbook, "tides": tides, "agent": agent}


def test_a_viewers_run_searches_the_agents_collections_with_the_owners_rights_only(world, owner, other_user):
    # The viewer may read neither collection, and has a personal one of their own: the agent's are searched.
    assert _files(other_user, "agent:helper") == ["moon.txt", "tides.txt"]
    assert _files(owner, "agent:helper") == ["moon.txt", "tides.txt"]  # not the owner's personal one either
    assert _files(other_user, "agent:helper", "bread dough flour yeast") == []


def test_the_default_agent_searches_the_callers_personal_collection(world, owner, other_user):
    assert _files(owner, "agent") == ["owner-notes.txt"]
    assert _files(other_user, "agent:default") == ["bread.txt"]
    assert _files(None, "agent") == []  # an anonymous caller has no personal collection


def test_a_viewers_collection_comes_in_only_when_the_agent_names_it(world, owner, other_user):
    personal = kb.collection_personal(other_user.pk)
    client_for(other_user).put(f"/api/kb/collections/{personal.pk}/access", {"visibility": "shared", "grants": [
        {"user": owner.pk, "role": "viewer"}]}, format="json")
    assert _files(other_user, "agent:helper") == ["moon.txt", "tides.txt"]  # readable by the owner, not named
    named = client_for(owner).patch(f"/api/agents/{world['agent']['id']}", {"knowledge": [
        str(world["handbook"].pk), str(personal.pk)]}, format="json")
    assert named.status_code == 200, named.content
    assert _files(other_user, "agent:helper") == ["bread.txt", "moon.txt"]


def test_a_collection_the_owner_lost_access_to_gives_nothing_at_once(world, owner, other_user):
    third, tides = world["third"], world["tides"]
    closed = client_for(third).put(f"/api/kb/collections/{tides.pk}/access", {"visibility": "private"},
                                   format="json")
    assert closed.status_code == 200
    assert _files(other_user, "agent:helper") == ["moon.txt"]  # the agent itself is unchanged
    assert _files(owner, "agent:helper") == ["moon.txt"]


def test_a_deleted_collection_is_skipped(world, owner, other_user):
    kb.collection_delete(world["handbook"])
    assert _files(other_user, "agent:helper") == ["tides.txt"]
    kb.collection_delete(world["tides"])
    assert _files(other_user, "agent:helper") == []


def test_a_deactivated_owners_agent_still_searches_what_the_owner_could_read_for_its_viewer(world, owner,
                                                                                              other_user, admin):
    owners_token = client_for(owner)
    deactivated = client_for(admin).patch(f"/api/users/{owner.pk}", {"is_active": False}, format="json")
    assert deactivated.status_code == 200 and deactivated.json()["is_active"] is False
    # The owner's own collection and the one shared with them, as before.
    assert _files(other_user, "agent:helper") == ["moon.txt", "tides.txt"]
    # The owner themself holds nothing: no sign-in, no role on their own collection.
    owner.refresh_from_db()
    assert owners_token.post("/api/kb/search", {"query": QUERY}, format="json").status_code == 401
    assert not can(owner, USE, world["handbook"])
    assert not Collection.objects.filter(visible_q(owner, Collection)).exists()


def test_a_deactivated_owners_agent_reads_with_their_rights_only(world, owner, other_user):
    # What the owner lost access to stays out, and the viewer's own collections never come in.
    tides = world["tides"]
    assert client_for(world["third"]).put(f"/api/kb/collections/{tides.pk}/access", {"visibility": "private"},
                                          format="json").status_code == 200
    owner.is_active = False
    owner.save()
    assert _files(other_user, "agent:helper") == ["moon.txt"]
    assert _files(other_user, "agent:helper", "bread dough flour yeast") == []


def test_an_editor_still_saves_a_deactivated_owners_agent_with_its_collections(world, owner, other_user):
    agent = world["agent"]
    assert client_for(owner).put(f"/api/agents/{agent['id']}/access", {"visibility": "shared", "grants": [
        {"user": other_user.pk, "role": "editor"}]}, format="json").status_code == 200
    owner.is_active = False
    owner.save()
    knowledge = [str(world["tides"].pk), str(world["handbook"].pk)]  # kept, in another order
    saved = client_for(other_user).patch(f"/api/agents/{agent['id']}", {"knowledge": knowledge}, format="json")
    assert saved.status_code == 200, saved.content
    assert saved.json()["knowledge"] == knowledge
    assert _files(other_user, "agent:helper") == ["moon.txt", "tides.txt"]


def test_an_agent_without_knowledge_searches_nothing(world, owner, other_user):
    make(client_for(owner), slug="bare")
    settings = runtime.resolve_now(owner, "agent:bare").settings
    assert (settings.kb_personal, settings.knowledge, settings.kb_enabled) == (False, (), False)
    assert _files(owner, "agent:bare") == []


def test_a_run_door_of_the_default_agent_searches_the_collections_an_admin_lists_on_it(world, owner, other_user,
                                                                                      admin_client):
    """Sessions, scheduled tasks and llm nodes name their agent by slug (run_settings_now): `default` searches the
    caller's personal collection and the collections listed on it that the caller may read."""
    from agents_app.services import default_ensure

    handbook = world["handbook"]
    handbook.visibility = "everyone"
    handbook.save(update_fields=["visibility"])
    listed = admin_client.patch(f"/api/agents/{default_ensure().pk}", {"knowledge": [str(handbook.pk)]},
                                format="json")
    assert listed.status_code == 200, listed.content
    settings = runtime.run_settings_now(other_user, "default")
    block = knowledge_context_now(ContextRequest(other_user.pk, QUERY, settings))
    assert block is not None
    assert sorted(source["document"]["filename"] for source in block.sources) == ["bread.txt", "moon.txt"]

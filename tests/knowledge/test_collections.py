"""Knowledge collections: shared through organisation's access rule (viewers search, editors add and delete,
the owner deletes, shares and hands over), searched together in one ranking, each counted in its owner's quota."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from agentsite.core.errors import AppError
from knowledge import index, lexical, services
from knowledge.embedding import embed_many, to_bytes
from knowledge.models import KEY_BASE, Collection, Document
from knowledge.selectors import MAX_COLLECTIONS, chunk_search, collections_readable, kb_usage_for
from organisation.models import Group, Membership
from tests.conftest import client_for
from tests.knowledge.test_matrix_cache import BREAD, MOON, in_another_process

pytestmark = pytest.mark.django_db

TIDES = "The tides rise and fall twice a day because the Moon pulls the oceans of the Earth towards it."
OTTERS = "Sea otters hold hands while they sleep so that they do not drift apart on the water."


@pytest.fixture
def team(django_user_model):
    alice = django_user_model.objects.create_user("alice", password="x-correct-horse-1")
    bob = django_user_model.objects.create_user("bob", password="x-correct-horse-1")
    carol = django_user_model.objects.create_user("carol", password="x-correct-horse-1")
    group = Group.objects.create(name="readers")
    Membership.objects.create(group=group, user=bob)
    return {"alice": alice, "bob": bob, "carol": carol, "group": group,
            "a": client_for(alice), "b": client_for(bob), "c": client_for(carol)}


def code(response) -> str:
    return response.json()["error"]["code"]


def add(client, content: str, filename: str = "doc.txt", collection: str | None = None):
    body = {"filename": filename, "content": content, **({"collection": collection} if collection else {})}
    return client.post("/api/kb/documents", body, format="json")


def search(client, query: str, collections: list[str] | None = None, **extra):
    body = {"query": query, **({"collections": collections} if collections is not None else {}), **extra}
    return client.post("/api/kb/search", body, format="json")


def share(client, collection_id: str, group: Group, role: str = "viewer"):
    response = client.put(f"/api/kb/collections/{collection_id}/access",
                          {"visibility": "shared", "grants": [{"group": group.pk, "role": role}]}, format="json")
    assert response.status_code == 200, response.content
    return response


@pytest.fixture
def shared(team):
    """alice's collection "lunar" with the moon document, shared with bob's group as viewer."""
    created = team["a"].post("/api/kb/collections", {"name": "lunar", "description": "about the Moon"},
                             format="json")
    assert created.status_code == 201, created.content
    collection = created.json()
    assert collection["owner"] == {"id": team["alice"].pk, "username": "alice"}
    assert collection["role"] == "owner" and collection["personal"] is False
    assert collection["access"] == {"visibility": "private", "grants_count": 0}
    document = add(team["a"], MOON, "moon.txt", collection["id"])
    assert document.status_code == 201, document.content
    share(team["a"], collection["id"], team["group"])
    return {**team, "id": collection["id"], "moon": document.json()["id"]}


def test_a_group_member_finds_the_shared_passages_and_sees_the_collection(shared):
    results = search(shared["b"], "astronauts landed on the Moon", [shared["id"]]).json()["results"]
    assert results[0]["document"]["filename"] == "moon.txt"
    assert results[0]["collection"] == {"id": shared["id"], "name": "lunar"}
    listed = shared["b"].get("/api/kb/collections").json()["results"]
    assert [(row["name"], row["role"], row["documents"], row["chunks"]) for row in listed] == [
        ("lunar", "viewer", 1, 1)]
    assert listed[0]["access"] == {"visibility": "shared", "grants_count": 1}
    assert shared["b"].get(f"/api/kb/collections/{shared['id']}").json()["role"] == "viewer"
    documents = shared["b"].get(f"/api/kb/documents?collection={shared['id']}").json()["results"]
    assert [row["filename"] for row in documents] == ["moon.txt"]
    context = shared["b"].post("/api/kb/context", {"query": "Apollo 11", "collections": [shared["id"]]},
                               format="json").json()["context"]
    assert context.startswith("[moon.txt] ")
    # bob's own default search is his personal collection, which has nothing.
    assert search(shared["b"], "astronauts landed on the Moon").json()["results"] == []


def test_a_viewer_may_neither_add_nor_delete(shared):
    refused = add(shared["b"], BREAD, "bread.txt", shared["id"])
    assert (refused.status_code, code(refused)) == (403, "forbidden")
    assert (shared["b"].delete(f"/api/kb/documents/{shared['moon']}").status_code, 403) == (403, 403)
    assert shared["b"].patch(f"/api/kb/collections/{shared['id']}", {"name": "mine"}, format="json").status_code == 403
    assert shared["b"].delete(f"/api/kb/collections/{shared['id']}").status_code == 403
    assert shared["b"].get(f"/api/kb/collections/{shared['id']}/access").status_code == 403
    assert Document.objects.filter(collection_id=shared["id"]).count() == 1


def test_an_outsider_gets_404_and_never_sees_the_passages(shared):
    carol = shared["c"]
    add(carol, OTTERS, "otters.txt")
    missing = search(carol, "astronauts landed on the Moon", [shared["id"]])
    assert (missing.status_code, code(missing)) == (404, "not_found")
    assert shared["id"] in missing.json()["error"]["message"]
    unknown = str(uuid.uuid4())
    assert unknown in search(carol, "Moon", [unknown]).json()["error"]["message"]
    for mode in ("hybrid", "lexical", "vector"):
        results = search(carol, "astronauts landed on the Moon Apollo", mode=mode).json()["results"]
        assert "moon.txt" not in {row["document"]["filename"] for row in results}
    assert carol.get(f"/api/kb/collections/{shared['id']}").status_code == 404
    assert carol.get(f"/api/kb/documents?collection={shared['id']}").status_code == 404
    assert code(add(carol, BREAD, "bread.txt", shared["id"])) == "not_found"
    assert carol.delete(f"/api/kb/documents/{shared['moon']}").status_code == 404
    assert carol.delete(f"/api/kb/collections/{shared['id']}").status_code == 404
    assert carol.post("/api/kb/context", {"query": "Moon", "collections": [shared["id"]]},
                      format="json").status_code == 404
    assert [row["personal"] for row in carol.get("/api/kb/collections").json()["results"]] == [True]


def test_an_editor_adds_and_deletes_and_the_owners_quota_counts_it(shared, settings):
    share(shared["a"], shared["id"], shared["group"], role="editor")
    added = add(shared["b"], BREAD, "bread.txt", shared["id"])
    assert added.status_code == 201, added.content
    document = Document.objects.get(pk=added.json()["id"])
    assert document.owner_id == shared["bob"].pk and str(document.collection_id) == shared["id"]
    assert kb_usage_for(owner_id=shared["alice"].pk) == sum(
        Document.objects.filter(collection_id=shared["id"]).values_list("stored_bytes", flat=True))
    assert kb_usage_for(owner_id=shared["bob"].pk) == 0
    results = search(shared["a"], "knead the bread dough", [shared["id"]]).json()["results"]
    assert results[0]["document"]["filename"] == "bread.txt"
    assert shared["b"].delete(f"/api/kb/documents/{added.json()['id']}").status_code == 204
    # alice's quota is full: bob, with nothing of his own, cannot add to her collection.
    settings.AGENTSITE_KB_QUOTA_BYTES = kb_usage_for(owner_id=shared["alice"].pk) + 10
    refused = add(shared["b"], BREAD, "bread.txt", shared["id"])
    assert (refused.status_code, code(refused)) == (413, "quota_exceeded")
    assert add(shared["b"], BREAD, "bread.txt").status_code == 201  # his own personal collection: his quota


def test_a_member_removed_from_the_group_loses_access_on_the_next_request(shared):
    assert search(shared["b"], "Moon", [shared["id"]]).status_code == 200
    Membership.objects.filter(group=shared["group"], user=shared["bob"]).delete()
    assert search(shared["b"], "Moon", [shared["id"]]).status_code == 404
    assert shared["b"].get("/api/kb/collections").json()["results"] == []


def test_a_deactivated_owners_shared_collection_still_answers_its_viewers_and_not_its_owner(shared, admin):
    deactivated = client_for(admin).patch(f"/api/users/{shared['alice'].pk}", {"is_active": False}, format="json")
    assert deactivated.status_code == 200 and deactivated.json()["is_active"] is False
    results = search(shared["b"], "astronauts landed on the Moon", [shared["id"]]).json()["results"]
    assert [row["document"]["filename"] for row in results] == ["moon.txt"]
    assert shared["b"].post("/api/kb/context", {"query": "Apollo 11", "collections": [shared["id"]]},
                            format="json").json()["context"].startswith("[moon.txt] ")
    assert search(shared["a"], "Moon", [shared["id"]]).status_code == 401  # the owner themself: signed out


def test_one_search_ranks_across_collections_each_hit_naming_its_own(team):
    alice = team["a"]
    ids = [alice.post("/api/kb/collections", {"name": name}, format="json").json()["id"]
           for name in ("sea", "sky", "kitchen")]
    add(alice, OTTERS, "otters.txt", ids[0])
    add(alice, TIDES, "tides.txt", ids[0])
    add(alice, MOON, "moon.txt", ids[1])
    add(alice, BREAD, "bread.txt", ids[2])
    for mode in ("hybrid", "lexical", "vector"):
        results = search(alice, "the Moon and the Earth", ids[:2], mode=mode, topK=5).json()["results"]
        assert {row["document"]["filename"] for row in results[:2]} == {"moon.txt", "tides.txt"}, mode
        home = {"otters.txt": ("sea", ids[0]), "tides.txt": ("sea", ids[0]), "moon.txt": ("sky", ids[1])}
        for row in results:
            assert (row["collection"]["name"], row["collection"]["id"]) == home[row["document"]["filename"]]
        ranks = [row["rank_score"] for row in results]
        assert ranks == sorted(ranks, reverse=True)
        one = search(alice, "the Moon and the Earth", ids[:2], mode=mode, topK=1).json()["results"]
        assert len(one) == 1 and one[0]["document"] == results[0]["document"]
    # The kitchen is not searched unless named.
    assert "bread.txt" not in {row["document"]["filename"] for row in
                               search(alice, "bread dough", ids[:2]).json()["results"]}
    assert search(alice, "bread dough", ids).json()["results"][0]["document"]["filename"] == "bread.txt"


def test_the_ranking_across_collections_equals_one_collection_holding_them_all(team):
    """Per-collection rankings merged, then fused: the same order as the documents in one collection (the
    vector ranker's cosine does not depend on the collection)."""
    alice = team["a"]
    both = alice.post("/api/kb/collections", {"name": "both"}, format="json").json()["id"]
    first = alice.post("/api/kb/collections", {"name": "first"}, format="json").json()["id"]
    second = alice.post("/api/kb/collections", {"name": "second"}, format="json").json()["id"]
    for number, text in enumerate([MOON, TIDES, OTTERS, BREAD]):
        add(alice, text, f"{number}.txt", both)
        add(alice, text, f"{number}.txt", first if number % 2 else second)
    together = search(alice, "the Moon pulls the water", [both], mode="vector", topK=4).json()["results"]
    apart = search(alice, "the Moon pulls the water", [first, second], mode="vector", topK=4).json()["results"]
    assert [(row["document"]["filename"], row["score"]) for row in apart] == [
        (row["document"]["filename"], row["score"]) for row in together]


def test_the_names_and_the_number_of_collections_are_bounded(team):
    alice = team["a"]
    assert alice.post("/api/kb/collections", {"name": "x" * 100}, format="json").status_code == 201
    for name in ("x" * 101, "", "   "):
        response = alice.post("/api/kb/collections", {"name": name}, format="json")
        assert (response.status_code, code(response)) == (400, "invalid"), name
    taken = alice.post("/api/kb/collections", {"name": "x" * 100}, format="json")
    assert (taken.status_code, code(taken)) == (409, "conflict")
    # Another user may use the same name.
    assert team["b"].post("/api/kb/collections", {"name": "x" * 100}, format="json").status_code == 201
    ids = [str(services.collection_create(owner_id=team["alice"].pk, name=f"c{number}").pk)
           for number in range(MAX_COLLECTIONS)]
    assert search(alice, "anything", ids).status_code == 200
    assert search(alice, "anything", [*ids, ids[0]]).status_code == 400  # 51 ids, even with a repeat
    over = search(alice, "anything", [*ids, str(uuid.uuid4())])
    assert (over.status_code, code(over)) == (400, "invalid")
    assert search(alice, "anything", []).status_code == 400
    assert search(alice, "anything", ["not-a-uuid"]).status_code == 400
    assert alice.get("/api/kb/documents?collection=nope").status_code == 400
    renamed = alice.patch(f"/api/kb/collections/{ids[0]}", {"name": "c1"}, format="json")
    assert (renamed.status_code, code(renamed)) == (409, "conflict")
    assert alice.patch(f"/api/kb/collections/{ids[0]}", {"name": "y" * 101}, format="json").status_code == 400
    changed = alice.patch(f"/api/kb/collections/{ids[0]}", {"name": "zero", "description": "d"}, format="json")
    assert (changed.json()["name"], changed.json()["description"]) == ("zero", "d")


def test_the_selector_refuses_more_than_50_collections_for_any_caller(team):
    ids = [services.collection_create(owner_id=team["alice"].pk, name=f"c{number}").pk
           for number in range(MAX_COLLECTIONS + 1)]
    assert len(collections_readable(team["alice"], ids[:MAX_COLLECTIONS])) == MAX_COLLECTIONS
    with pytest.raises(AppError) as refused:
        collections_readable(team["alice"], ids)
    assert (refused.value.status, refused.value.code) == (400, "invalid")


def test_the_personal_collection_is_the_default_and_is_cleared_not_deleted(team):
    alice = team["a"]
    assert add(alice, MOON, "moon.txt").status_code == 201
    personal = Collection.objects.get(owner=team["alice"], personal=True)
    assert personal.key == team["alice"].pk and personal.name == "Personal"
    other = alice.post("/api/kb/collections", {"name": "other"}, format="json").json()["id"]
    add(alice, BREAD, "bread.txt", other)
    assert [row["filename"] for row in alice.get("/api/kb/documents").json()["results"]] == ["moon.txt"]
    refused = alice.delete(f"/api/kb/collections/{personal.pk}")
    assert (refused.status_code, code(refused)) == (409, "conflict")
    assert alice.delete("/api/kb/clear").status_code == 204
    assert list(Document.objects.values_list("filename", flat=True)) == ["bread.txt"]
    listed = alice.get("/api/kb/collections").json()["results"]
    assert [(row["name"], row["personal"]) for row in listed] == [("Personal", True), ("other", False)]


def test_deleting_a_collection_deletes_its_documents_and_its_passages_go(team):
    alice = team["a"]
    doomed = alice.post("/api/kb/collections", {"name": "doomed"}, format="json").json()["id"]
    add(alice, MOON, "moon.txt", doomed)
    add(alice, MOON, "moon.txt")
    assert search(alice, "Moon", [doomed]).json()["results"]
    assert alice.delete(f"/api/kb/collections/{doomed}").status_code == 204
    assert not Collection.objects.filter(pk=doomed).exists()
    assert list(Document.objects.values_list("collection__personal", flat=True)) == [True]
    assert search(alice, "Moon", [doomed]).status_code == 404
    assert lexical.lexical_rank(Collection.objects.get(personal=True).key, "Moon", 5)


def test_a_handed_over_personal_collection_becomes_an_ordinary_one_of_the_new_owner(team, settings):
    alice, bob = team["alice"], team["bob"]
    add(team["a"], MOON, "moon.txt")
    add(team["b"], OTTERS, "otters.txt")  # bob's own "Personal"
    personal = Collection.objects.get(owner=alice, personal=True)
    moved = team["a"].post(f"/api/kb/collections/{personal.pk}/transfer", {"user": bob.pk}, format="json")
    assert moved.status_code == 200, moved.content
    personal.refresh_from_db()
    assert (personal.owner_id, personal.personal, personal.name) == (bob.pk, False, "Personal (from alice)")
    assert kb_usage_for(owner_id=alice.pk) == 0
    assert kb_usage_for(owner_id=bob.pk) == sum(Document.objects.values_list("stored_bytes", flat=True))
    assert team["a"].get(f"/api/kb/collections/{personal.pk}").status_code == 404
    hits = search(team["b"], "astronauts Moon", [str(personal.pk)]).json()["results"]
    assert hits[0]["collection"]["name"] == "Personal (from alice)"
    # alice's next add makes her a new personal collection, under a new key (hers is taken).
    assert add(team["a"], BREAD, "bread.txt").status_code == 201
    fresh = Collection.objects.get(owner=alice, personal=True)
    assert fresh.pk != personal.pk and fresh.key >= KEY_BASE
    assert [row["document"]["filename"] for row in search(team["a"], "bread dough moon").json()["results"]] == [
        "bread.txt"]


def test_an_admin_may_search_any_collection_by_its_id(shared, admin):
    results = search(client_for(admin), "Apollo", [shared["id"]]).json()["results"]
    assert results[0]["document"]["filename"] == "moon.txt"


@pytest.mark.e2e  # in_another_process starts a Python process
@pytest.mark.django_db(transaction=True)  # the other process must see committed rows
def test_a_write_to_a_shared_collection_in_another_process_reaches_every_searcher(django_user_model):
    alice = django_user_model.objects.create_user("alice", password="x-correct-horse-1")
    bob = django_user_model.objects.create_user("bob", password="x-correct-horse-1")
    services.document_ingest(owner_id=alice.pk, filename="moon.txt", content=MOON)
    personal = Collection.objects.get(owner=alice, personal=True)
    personal.visibility = "everyone"
    personal.save()
    for mode in ("vector", "hybrid"):
        assert [hit.filename for hit in chunk_search(query="bread dough Moon", mode=mode,
                                                     collections=[personal])] == ["moon.txt"]
    assert index.cached_matrix(personal.key) is not None
    in_another_process(alice.pk, "add", f"bread.txt|{BREAD}")  # into alice's personal collection
    readable = client_for(bob)
    for mode in ("vector", "hybrid", "lexical"):
        results = search(readable, "knead the bread dough", [str(personal.pk)], mode=mode).json()["results"]
        assert results[0]["document"]["filename"] == "bread.txt", mode


@pytest.mark.django_db(transaction=True)  # migrations run outside a test transaction
def test_the_migration_moves_each_owners_documents_into_their_personal_collection(django_user_model):
    alice = django_user_model.objects.create_user("alice", password="x-correct-horse-1")
    bob = django_user_model.objects.create_user("bob", password="x-correct-horse-1")
    django_user_model.objects.create_user("carol", password="x-correct-horse-1")  # no documents: no collection
    executor = MigrationExecutor(connection)
    executor.migrate([("knowledge", "0007_lexical_postings")])
    old = executor.loader.project_state([("knowledge", "0007_lexical_postings")]).apps
    old_document, old_chunk = old.get_model("knowledge", "Document"), old.get_model("knowledge", "Chunk")
    made = {}
    for user, text in ((alice, MOON), (bob, BREAD), (alice, TIDES)):
        document = old_document.objects.create(owner_id=user.pk, filename=f"{user.username}.txt", content=text,
                                               size=len(text))
        chunk = old_chunk.objects.create(document=document, index=0, text=text,
                                         vector=to_bytes(embed_many([text])[0]))
        lexical.index_add(owner_id=user.pk, chunk_ids=[chunk.pk], words=[lexical.terms(text)])  # as 0007 kept it
        made[document.pk] = user.pk

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    collections = {collection.owner_id: collection for collection in Collection.objects.all()}
    assert set(collections) == {alice.pk, bob.pk}
    for collection in collections.values():
        assert (collection.personal, collection.name, collection.key) == (True, "Personal", collection.owner_id)
    for document in Document.objects.all():
        assert document.collection.owner_id == made[document.pk] == document.owner_id
    # The lexical index (keyed by the owner's id before) answers for the personal collections unchanged.
    for mode in ("lexical", "vector", "hybrid"):
        hits = chunk_search(owner_id=alice.pk, query="the Moon pulls the oceans", mode=mode)
        assert {hit.filename for hit in hits} == {"alice.txt"}, mode
        assert {hit.collection_name for hit in hits} == {"Personal"}
    assert chunk_search(owner_id=bob.pk, query="knead the dough", mode="lexical")[0].filename == "bob.txt"


def test_a_word_is_common_by_its_chunks_in_all_the_searched_collections(team, monkeypatch):
    """Over several collections one lexical ranking: a word in more than COMMON_CHUNKS chunks of them together
    is left out (in each alone it would not be), and a chunk scores as in its own collection's search."""
    monkeypatch.setattr(lexical, "COMMON_CHUNKS", 4)
    first = services.collection_create(owner_id=team["alice"].pk, name="first")
    second = services.collection_create(owner_id=team["alice"].pk, name="second")
    for number in range(3):  # 3 + 3 chunks hold "gadget": common in both together, not in either
        for collection in (first, second):
            services.document_ingest(owner_id=team["alice"].pk, filename=f"g{number}.txt", collection=collection,
                                     content=f"A gadget in paragraph {number}.")
    services.document_ingest(owner_id=team["alice"].pk, filename="rare.txt", collection=second,
                             content="A flange beside one gadget.")
    assert len(lexical.lexical_rank(first.key, "gadget", 10)) == 3  # alone, not common
    both = lexical.lexical_rank_many([first.key, second.key], "gadget flange", 10)
    alone = lexical.lexical_rank(second.key, "flange", 10)
    assert both == [(alone[0][0], pytest.approx(alone[0][1]))]  # "gadget" (7 chunks in all) weighs nothing
    assert lexical.lexical_rank_many([first.key, second.key], "gadget", 10) == []  # all common, 7 hold it: > 4
    monkeypatch.setattr(lexical, "COMMON_CHUNKS", 7)
    ranked = lexical.lexical_rank_many([first.key, second.key], "gadget", 10)
    assert len(ranked) == 7 and ranked == sorted(ranked, key=lambda pair: -pair[1])
    own = dict(lexical.lexical_rank(first.key, "gadget", 10))
    assert {chunk: score for chunk, score in ranked if chunk in own} == pytest.approx(own)

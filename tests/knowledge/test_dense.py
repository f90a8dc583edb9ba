"""The dense embedding model (knowledge/dense.py): the real model loaded and run, its vectors stored per chunk,
its matrix kept in step and under the cache budget, the backfill, and everything unchanged without it."""

from __future__ import annotations

import io
import threading

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from django.test import TestCase
from rest_framework.test import APIClient

from agentsite.core.errors import AppError
from knowledge import dense, index, services
from knowledge.dense_index import DENSE, dense_rank
from knowledge.models import Chunk, Collection, Document, KnowledgeStamp
from tests import needs

pytestmark = pytest.mark.django_db

DOCUMENTS = {
    "penguins.txt": "Penguins are flightless birds. They swim in the cold southern oceans and eat fish and krill.",
    "bread.txt": "To bake bread, mix flour, water, yeast and salt. Knead the dough, let it rise, then bake it hot.",
    "moon.txt": "The Moon orbits the Earth every 27 days. Astronauts of Apollo 11 first landed on the Moon in 1969.",
    "heapq.txt": "This module provides an implementation of the heap queue algorithm, also known as the priority "
                 "queue algorithm. Heaps are binary trees for which every parent node has a value less than or "
                 "equal to any of its children.",
}
# Questions that share no meaningful word with their document: only a model of meaning finds them.
PARAPHRASES = [
    ("seabirds that cannot take to the air", "penguins.txt"),
    ("how to make a loaf at home", "bread.txt"),
    ("when did people first walk on our satellite", "moon.txt"),
    ("always take out the smallest element first", "heapq.txt"),
]


@pytest.fixture
def model(settings):
    needs.dense_model()
    settings.AGENTSITE_KB_DENSE = True
    return dense.embedder()


@pytest.fixture
def absent(settings, monkeypatch):
    """The model as if not installed: its files are not found (the setting left on)."""
    settings.AGENTSITE_KB_DENSE = True
    monkeypatch.setattr(dense, "model_files", lambda: None)


def ingest(owner, documents=DOCUMENTS) -> dict[str, Document]:
    """Add documents, each committed: the dense vectors come from the task each add queues (run inline here)."""
    added = {}
    for name, text in documents.items():
        with TestCase.captureOnCommitCallbacks(execute=True):
            added[name] = services.document_ingest(owner_id=owner.pk, filename=name, content=text)
        added[name].refresh_from_db()
    return added


def filename_of(chunk_id: int) -> str:
    return Chunk.objects.select_related("document").get(pk=chunk_id).document.filename


def test_the_model_gives_unit_float32_vectors_that_do_not_depend_on_the_batch(model):
    texts = ["heap queue", "A much longer text about priority queues and binary heaps. " * 8, "", "熊猫吃竹子"]
    together = model.embed(texts)
    assert together.shape == (4, dense.DIMENSIONS) and together.dtype == np.float32
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    alone = np.stack([model.embed([text])[0] for text in texts])
    assert np.abs(together - alone).max() < 1e-5
    assert np.array_equal(model.embed(texts), together), "the same batch gives other vectors"
    assert model.embed([]).shape == (0, dense.DIMENSIONS)


def test_the_model_places_a_paraphrase_nearer_than_an_unrelated_text(model):
    query, near, far = model.embed(["a priority queue where the smallest item comes out first",
                                    "heap queue algorithm: heappop returns the smallest element",
                                    "parse command line options and arguments"])
    assert query @ near > query @ far + 0.2


def test_a_long_text_is_cut_at_the_models_limit(model):
    long = "word " * 2000
    assert model.embed([long]).shape == (1, dense.DIMENSIONS)
    assert np.allclose(model.embed([long])[0], model.embed([long + "tail " * 10])[0], atol=1e-5)


def test_threads_share_one_model(model):
    expected = model.embed(["shared across threads"])[0]
    results, errors = [], []

    def run():
        try:
            results.append(model.embed(["shared across threads"])[0])
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors and len(results) == 4
    assert all(np.abs(result - expected).max() < 1e-5 for result in results)


def test_ingest_stores_a_dense_vector_per_chunk_and_counts_it_in_the_quota(model, owner):
    document = ingest(owner, {"heapq.txt": DOCUMENTS["heapq.txt"] * 6})["heapq.txt"]
    chunks = list(Chunk.objects.filter(document=document).order_by("index"))
    assert len(chunks) > 1 and all(chunk.dense is not None for chunk in chunks)
    stored = np.frombuffer(bytes(chunks[0].dense), dtype="<f4")
    assert stored.shape == (dense.DIMENSIONS,)
    assert np.abs(stored - model.embed([chunks[0].text])[0]).max() < 1e-5
    without = services.stored_size(text=document.content, chunks=[chunk.text for chunk in chunks])
    assert document.stored_bytes == without + len(chunks) * dense.VECTOR_BYTES


def test_the_dense_vectors_are_made_off_the_request_and_the_document_is_searchable_at_once(model, owner):
    from knowledge.selectors import chunk_search

    with TestCase.captureOnCommitCallbacks(execute=False) as callbacks:
        document = services.document_ingest(owner_id=owner.pk, filename="penguins.txt",
                                            content=DOCUMENTS["penguins.txt"])
        # Committed but its task not run yet: no dense vector, found by the other signals, not by the dense one.
        assert not Chunk.objects.filter(document=document, dense__isnull=False).exists()
        assert document.stored_bytes == services.stored_size(text=document.content, chunks=[
            chunk.text for chunk in Chunk.objects.filter(document=document).order_by("index")])
        assert dense_rank(owner.pk, "flightless birds", 5) == []
        hits = chunk_search(owner_id=owner.pk, query="flightless birds", top_k=5, mode="hybrid")
        assert hits and hits[0].document_id == document.pk
    assert callbacks, "the add queued no task"
    for callback in callbacks:
        callback()  # the task queue (sync in tests) runs dense_embed_pending now
    assert not Chunk.objects.filter(document=document, dense__isnull=True).exists()
    assert filename_of(dense_rank(owner.pk, "seabirds that cannot take to the air", 1)[0][0]) == "penguins.txt"
    document.refresh_from_db()
    chunks = Chunk.objects.filter(document=document).count()
    assert document.stored_bytes == services.stored_size(text=document.content, chunks=[
        chunk.text for chunk in Chunk.objects.filter(document=document)], dense_vectors=True)
    assert services.dense_embed_pending(owner.pk) == 0 and chunks > 0  # nothing left to fill


def test_the_quota_keeps_room_for_the_dense_vectors_still_to_come(model, owner, settings):
    text = DOCUMENTS["bread.txt"]
    size = services.stored_size(text=text, chunks=[text])
    settings.AGENTSITE_KB_QUOTA_BYTES = size + dense.VECTOR_BYTES - 1
    with pytest.raises(AppError) as refused:
        services.document_ingest(owner_id=owner.pk, filename="bread.txt", content=text)
    assert refused.value.code == "quota_exceeded"
    settings.AGENTSITE_KB_QUOTA_BYTES = size + dense.VECTOR_BYTES
    services.document_ingest(owner_id=owner.pk, filename="bread.txt", content=text)


@pytest.mark.parametrize(("query", "answer"), PARAPHRASES)
def test_the_dense_signal_finds_a_paraphrase(model, owner, query, answer):
    ingest(owner)
    ranking = dense_rank(owner.pk, query, 5)
    assert filename_of(ranking[0][0]) == answer
    assert all(0 < score <= 1 for _, score in ranking)
    assert [score for _, score in ranking] == sorted((score for _, score in ranking), reverse=True)


def test_the_dense_matrix_follows_adds_and_deletes_and_never_shows_another_owner(model, owner, other_user):
    documents = ingest(owner)
    ingest(other_user, {"penguins-too.txt": DOCUMENTS["penguins.txt"]})
    found = [filename_of(chunk_id) for chunk_id, _ in dense_rank(owner.pk, "flightless birds", 10)]
    assert found[0] == "penguins.txt" and set(found) <= set(DOCUMENTS), "another owner's chunk was ranked"
    found = [filename_of(chunk_id) for chunk_id, _ in dense_rank(other_user.pk, "flightless birds", 10)]
    assert found == ["penguins-too.txt"]
    services.document_delete(owner_id=owner.pk, document_id=documents["penguins.txt"].pk)
    assert "penguins.txt" not in {filename_of(chunk_id) for chunk_id, _ in dense_rank(owner.pk, "penguins", 10)}
    ingest(owner, {"ice.txt": "Glaciers are rivers of ice that flow slowly down mountain valleys."})
    assert filename_of(dense_rank(owner.pk, "frozen water moving downhill", 1)[0][0]) == "ice.txt"


def test_the_dense_matrix_is_refreshed_after_another_process_writes(model, owner):
    ingest(owner, {"bread.txt": DOCUMENTS["bread.txt"]})
    assert dense_rank(owner.pk, "a loaf", 1)
    cached = index._cache.get(DENSE.key(owner.pk))
    assert cached is not None and cached.size == 1
    # Another process adds a document: its rows and a new stamp, without touching this process's cache.
    text = DOCUMENTS["moon.txt"]
    document = Document.objects.create(owner_id=owner.pk, collection=Collection.objects.get(owner=owner),
                                       filename="moon.txt", content=text, size=len(text))
    Chunk.objects.create(document=document, index=0, text=text, vector=b"\0" * services.VECTOR_BYTES,
                         dense=dense.to_bytes(model.embed([text])[0]))
    KnowledgeStamp.objects.filter(key=owner.pk).update(value=12345)
    assert filename_of(dense_rank(owner.pk, "our satellite", 1)[0][0]) == "moon.txt"
    assert index._cache.get(DENSE.key(owner.pk)).stamp == 12345


def test_the_dense_matrices_count_in_the_cache_budget(model, owner, other_user, settings):
    ingest(owner)
    ingest(other_user)
    dense_rank(owner.pk, "bread", 1)
    index.matrix_for(owner.pk)
    one = index._cache.get(DENSE.key(owner.pk))
    assert one.vectors.shape[1] == dense.DIMENSIONS
    assert index.cache_nbytes() == one.nbytes + index._cache.get(owner.pk).nbytes
    settings.AGENTSITE_KB_INDEX_CACHE_BYTES = one.nbytes + 1  # room for one dense matrix
    dense_rank(other_user.pk, "bread", 1)  # evicts the owner's matrices, least recently used first
    assert index.cache_nbytes() <= settings.AGENTSITE_KB_INDEX_CACHE_BYTES
    assert index._cache.get(DENSE.key(owner.pk)) is None
    assert filename_of(dense_rank(owner.pk, "how to make a loaf", 1)[0][0]) == "bread.txt", "rebuilt after eviction"


def test_backfill_gives_older_chunks_their_dense_vectors(model, owner, other_user, settings,
                                                        django_capture_on_commit_callbacks):
    out = io.StringIO()
    settings.AGENTSITE_KB_DENSE = False  # stored before the model was turned on
    documents = ingest(owner)
    ingest(other_user, {"other.txt": "Nothing to see."})
    assert not Chunk.objects.filter(dense__isnull=False).exists()
    before = {name: document.stored_bytes for name, document in documents.items()}
    settings.AGENTSITE_KB_DENSE = True
    assert dense_rank(owner.pk, "seabirds", 5) == [], "chunks without a dense vector were ranked"
    index.matrix_for(owner.pk)  # the hash matrix, cached: relabelled by the backfill, not re-read

    with django_capture_on_commit_callbacks(execute=True):
        call_command("kb_dense_backfill", "--user", owner.username, stdout=out)
    assert f"added to {sum(d.chunk_count for d in documents.values())} chunks of 4 documents" in out.getvalue()

    assert not Chunk.objects.filter(document__owner=owner, dense__isnull=True).exists()
    assert Chunk.objects.filter(document__owner=other_user, dense__isnull=True).exists()
    for name, document in documents.items():
        document.refresh_from_db()
        chunks = Chunk.objects.filter(document=document).count()
        assert document.stored_bytes == before[name] + chunks * dense.VECTOR_BYTES
    assert filename_of(dense_rank(owner.pk, "seabirds that cannot take to the air", 1)[0][0]) == "penguins.txt"
    assert index.cached_matrix(owner.pk).stamp == index.stamp_current(owner.pk)
    assert services.dense_backfill() == (1, 1), "the other owner's document"
    assert services.dense_backfill() == (0, 0), "a second run fills nothing"


def test_without_the_model_nothing_changes(absent, owner):
    assert not dense.available()
    documents = ingest(owner)
    assert not Chunk.objects.filter(dense__isnull=False).exists()
    for document in documents.values():
        texts = list(Chunk.objects.filter(document=document).values_list("text", flat=True))
        assert document.stored_bytes == services.stored_size(text=document.content, chunks=texts)
    assert dense_rank(owner.pk, "penguins", 5) == []
    assert index._cache.get(DENSE.key(owner.pk)) is None, "a dense matrix was built"
    with pytest.raises(dense.DenseUnavailable, match="agentsite\\[dense\\]"):
        dense.DenseEmbedder().embed(["x"])
    with pytest.raises(dense.DenseUnavailable):
        services.dense_backfill()
    with pytest.raises(CommandError, match="not installed"):
        call_command("kb_dense_backfill")


def test_the_setting_turns_an_installed_model_off(model, owner, settings):
    settings.AGENTSITE_KB_DENSE = False
    assert not dense.available()
    ingest(owner, {"bread.txt": DOCUMENTS["bread.txt"]})
    assert not Chunk.objects.filter(dense__isnull=False).exists()
    assert dense_rank(owner.pk, "bread", 5) == []


# --- the dense signal in the search (knowledge.ranking) ------------------------------------------------------

def test_hybrid_fuses_the_dense_signal_when_installed_and_mode_dense_ranks_by_it(model, owner):
    from knowledge import ranking
    from knowledge.selectors import chunk_search

    assert [ranker.name for ranker in ranking.rankers()][-1] == "dense", "the knowledge app did not register it"
    ingest(owner)
    for query, answer in PARAPHRASES:
        assert chunk_search(owner_id=owner.pk, query=query, mode="dense")[0].filename == answer
    hit = chunk_search(owner_id=owner.pk, query="seabirds that cannot take to the air", mode="dense")[0]
    assert hit.rank_score == dense_rank(owner.pk, "seabirds that cannot take to the air", 1)[0][1]
    # A question that shares no word with its document: the fusion still finds it through the dense signal.
    assert chunk_search(owner_id=owner.pk, query="when did people first walk on our satellite",
                        mode="hybrid")[0].filename == "moon.txt"


def test_without_the_model_hybrid_is_the_two_signal_search(owner, monkeypatch, settings):
    from knowledge import ranking
    from knowledge.dense_index import DenseRanker
    from knowledge.selectors import chunk_search

    settings.AGENTSITE_KB_DENSE = True
    ingest(owner)
    queries = [query for query, _ in PARAPHRASES] + ["penguins swim in cold oceans", "bake bread with yeast"]
    registered = ranking.ranker("dense")
    ranking.unregister_ranker("dense")  # as the knowledge app leaves it when the extra is not installed
    try:
        two_signals = {query: chunk_search(owner_id=owner.pk, query=query) for query in queries}
        with pytest.raises(AppError) as error:
            chunk_search(owner_id=owner.pk, query="penguins", mode="dense")
        assert error.value.status == 400 and "agentsite[dense]" in error.value.message
        # Registered, but the model's files gone (or the setting off): it ranks nothing, the fusion is unchanged.
        ranking.register_ranker(DenseRanker())
        monkeypatch.setattr(dense, "model_files", lambda: None)
        assert {query: chunk_search(owner_id=owner.pk, query=query) for query in queries} == two_signals
        assert chunk_search(owner_id=owner.pk, query="penguins", mode="dense") == []
    finally:
        ranking.unregister_ranker("dense")
        if registered is not None:
            ranking.register_ranker(registered)


def test_the_search_endpoint_takes_mode_dense(model, owner, owner_client):
    ingest(owner)
    response = owner_client.post("/api/kb/search", {"query": "how to make a loaf at home", "mode": "dense"},
                                 format="json")
    assert response.status_code == 200
    results = response.json()["results"]
    assert results[0]["document"]["filename"] == "bread.txt"
    assert [result["rank_score"] for result in results] == sorted((r["rank_score"] for r in results), reverse=True)
    assert 0 < results[0]["rank_score"] <= 1  # the dense cosine similarity


def test_the_search_endpoint_lists_the_modes_to_offer(model, owner_client, settings):
    assert owner_client.get("/api/kb/search").json() == {"modes": ["hybrid", "lexical", "vector", "dense"],
                                                         "default": "hybrid"}
    settings.AGENTSITE_KB_DENSE = False
    assert owner_client.get("/api/kb/search").json()["modes"] == ["hybrid", "lexical", "vector"]
    assert APIClient().get("/api/kb/search").status_code == 401


def test_the_search_endpoint_refuses_mode_dense_without_the_model(owner, owner_client):
    from knowledge import ranking

    registered = ranking.ranker("dense")
    ranking.unregister_ranker("dense")
    try:
        response = owner_client.post("/api/kb/search", {"query": "bread", "mode": "dense"}, format="json")
    finally:
        if registered is not None:
            ranking.register_ranker(registered)
    assert response.status_code == 400
    body = response.json()
    assert body["error"]["code"] == "invalid" and "agentsite[dense]" in body["error"]["message"]

"""The lexical index (SQLite FTS5 / PostgreSQL full text) is kept in step with the chunks, per owner, and the
search modes rank with it: `lexical` alone, `hybrid` fused with the vectors, `vector` the seed's rule.

Runs on whichever database the suite runs on; CI runs it on both (SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from knowledge import lexical, ranking, services
from knowledge.models import Chunk
from knowledge.selectors import chunk_search, context_build
from tests.knowledge.test_search import CORPUS, add

pytestmark = pytest.mark.django_db


@pytest.fixture
def corpus(owner):
    return {filename: add(owner, filename, text) for filename, text in CORPUS.items()}


def indexed_chunk_ids() -> set[int]:
    """The chunk ids the lexical index holds, all owners."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"SELECT rowid FROM {lexical.FTS_TABLE}")
        else:
            cursor.execute(f"SELECT chunk_id FROM {lexical.PG_TABLE}")
        return {row[0] for row in cursor.fetchall()}


def names(hits) -> list[str]:
    return [hit.filename for hit in hits]


def test_every_chunk_is_indexed_when_added_and_unindexed_when_its_document_goes(owner, other_user, corpus):
    theirs = add(other_user, "theirs.txt", "Notes about the Moon. " * 60)
    assert indexed_chunk_ids() == set(Chunk.objects.values_list("id", flat=True))
    moon_chunks = set(Chunk.objects.filter(document=corpus["moon.txt"]).values_list("id", flat=True))

    services.document_delete(owner_id=owner.pk, document_id=corpus["moon.txt"].pk)
    assert indexed_chunk_ids() == set(Chunk.objects.values_list("id", flat=True))
    assert not moon_chunks & indexed_chunk_ids()
    assert "moon.txt" not in names(chunk_search(owner_id=owner.pk, query="Moon astronauts", mode="lexical"))

    services.documents_clear(owner_id=owner.pk)
    assert indexed_chunk_ids() == set(Chunk.objects.filter(document=theirs).values_list("id", flat=True))
    get_user_model().objects.filter(pk=other_user.pk).delete()  # the owner's documents go by cascade
    assert indexed_chunk_ids() == set()


def test_a_failed_ingest_leaves_no_index_rows(owner, monkeypatch):
    add(owner, "kept.txt", "A document that was there before.")
    before = indexed_chunk_ids()

    def index_then_fail(**kwargs):
        real_index_add(**kwargs)
        raise RuntimeError("the process fails after indexing")

    real_index_add = lexical.index_add
    monkeypatch.setattr(lexical, "index_add", index_then_fail)
    with pytest.raises(RuntimeError):
        add(owner, "lost.txt", "This document must not be indexed. " * 50)
    assert indexed_chunk_ids() == before


@pytest.mark.parametrize("mode", ["lexical", "hybrid", "vector"])
@pytest.mark.parametrize(("query", "answer"), [
    ("大熊猫喜欢吃什么？", "熊猫.txt"),
    ("熊猫", "熊猫.txt"),
    ("长城有多长", "长城.txt"),
    ("中国的首都是哪里", "北京.txt"),
    ("日本で一番高い山は？", "富士山.txt"),
])
def test_chinese_and_japanese_queries_find_their_document_first_in_every_mode(owner, corpus, mode, query, answer):
    assert names(chunk_search(owner_id=owner.pk, query=query, top_k=5, mode=mode))[0] == answer


def test_lexical_search_stems_english_words_where_the_hash_vectors_see_no_common_word(owner, corpus):
    # "kneading" and "rises" are not words of bread.txt ("Knead", "rise"): the stems are.
    assert chunk_search(owner_id=owner.pk, query="kneading rises", mode="vector") == []
    lexical_hits = chunk_search(owner_id=owner.pk, query="kneading rises", mode="lexical")
    assert names(lexical_hits) == ["bread.txt"]
    assert lexical_hits[0].rank_score > 0  # BM25
    assert names(chunk_search(owner_id=owner.pk, query="kneading rises", mode="hybrid")) == ["bread.txt"]


def test_a_rare_word_outweighs_common_ones_in_lexical_and_hybrid_modes(owner):
    # Many chunks share the common words; one holds the rare word. Counting words (the vectors) favours the
    # chunks that repeat the common ones; BM25 weighs the rare word up.
    for number in range(12):
        add(owner, f"common{number}.txt", "The system of the server and the system of the client. " * 3)
    add(owner, "rare.txt", "Zeppelins float on hydrogen or helium; a system of a different kind.")
    query = "the system of the zeppelin"
    assert names(chunk_search(owner_id=owner.pk, query=query, top_k=3, mode="vector"))[0] != "rare.txt"
    assert names(chunk_search(owner_id=owner.pk, query=query, top_k=3, mode="lexical"))[0] == "rare.txt"
    assert names(chunk_search(owner_id=owner.pk, query=query, top_k=3, mode="hybrid"))[0] == "rare.txt"


def test_another_owners_documents_never_change_a_ranking(owner, other_user):
    add(owner, "apple.txt", "An apple today.")
    add(owner, "cherry.txt", "A cherry today.")
    add(owner, "apples.txt", "An apple tomorrow.")
    before = chunk_search(owner_id=owner.pk, query="apple cherry", top_k=5, mode="lexical")
    assert names(before)[0] == "cherry.txt"  # the rarer word of the owner's documents weighs more
    for number in range(40):  # the other user's documents make "cherry" the common word overall
        add(other_user, f"cherries{number}.txt", f"Cherry number {number}: a cherry, and another cherry.")
    after = chunk_search(owner_id=owner.pk, query="apple cherry", top_k=5, mode="lexical")
    assert names(after) == names(before)
    # Document frequencies are the owner's on both databases; on PostgreSQL N (the number of chunks) is the
    # owner's too, so the scores do not move at all (FTS5's bm25() counts N over the whole index).
    if connection.vendor == "postgresql":
        assert [hit.rank_score for hit in after] == [hit.rank_score for hit in before]
    assert names(chunk_search(owner_id=other_user.pk, query="apple", mode="lexical")) == []


def test_vector_mode_is_the_seeds_rule_and_every_mode_reports_the_cosine_as_score(owner, corpus):
    query = "Moon astronauts bread penguins"
    vector = chunk_search(owner_id=owner.pk, query=query, top_k=8, mode="vector")
    assert [hit.score for hit in vector] == sorted((hit.score for hit in vector), reverse=True)
    assert all(hit.score > 0 and hit.rank_score == hit.score for hit in vector)
    cosine = {hit.chunk_id: hit.score for hit in vector}
    for mode in ("hybrid", "lexical"):
        hits = chunk_search(owner_id=owner.pk, query=query, top_k=8, mode=mode)
        assert hits and [hit.rank_score for hit in hits] == sorted((hit.rank_score for hit in hits), reverse=True)
        for hit in hits:
            assert hit.score == cosine.get(hit.chunk_id, hit.score)  # the same cosine as the vector mode gives
            assert -1 <= hit.score <= 1


def test_hybrid_rank_score_is_the_weighted_sum_of_each_rankers_scaled_scores(owner, corpus):
    query = "Moon astronauts bread"
    vector = chunk_search(owner_id=owner.pk, query=query, top_k=50, mode="vector")
    lexical_hits = chunk_search(owner_id=owner.pk, query=query, top_k=50, mode="lexical")
    expected: dict[int, float] = {}
    for weight, hits in ((0.2, vector), (1.0, lexical_hits)):
        for hit in hits:
            expected[hit.chunk_id] = expected.get(hit.chunk_id, 0) + weight * hit.rank_score / hits[0].rank_score
    hybrid = chunk_search(owner_id=owner.pk, query=query, top_k=50, mode="hybrid")
    assert {hit.chunk_id: hit.rank_score for hit in hybrid} == pytest.approx(expected, abs=1e-5)


def test_a_query_of_stop_words_or_symbols_finds_nothing_lexically(owner, corpus):
    assert chunk_search(owner_id=owner.pk, query="the of and", mode="lexical") == []
    assert chunk_search(owner_id=owner.pk, query='"*" OR NEAR( ) -', mode="lexical") == []  # no FTS syntax leaks
    assert chunk_search(owner_id=owner.pk, query="!!! ???", mode="hybrid") == []


def test_the_context_uses_the_mode_it_is_given(owner, corpus):
    assert context_build(owner_id=owner.pk, query="kneading", max_chars=1000, mode="vector").hits == []
    context = context_build(owner_id=owner.pk, query="kneading", max_chars=1000)  # hybrid by default
    assert names(context.hits) == ["bread.txt"]


class _FixedRanker(ranking.Ranker):
    """A third signal for the test: ranks one given chunk first for any query."""

    name = "fixed-test"

    def __init__(self, chunk_id: int) -> None:
        self.chunk_id = chunk_id

    def rank(self, owner_id: int, query: str, k: int) -> ranking.Ranking:
        return [(self.chunk_id, 1.0)][:k]


def test_a_registered_ranker_joins_the_hybrid_fusion_without_other_changes(owner, corpus):
    giraffe = Chunk.objects.get(document=corpus["giraffes.txt"]).pk
    before = chunk_search(owner_id=owner.pk, query="Moon", top_k=5, mode="hybrid")
    assert "giraffes.txt" not in names(before)
    ranking.register_ranker(_FixedRanker(giraffe))
    try:
        after = chunk_search(owner_id=owner.pk, query="Moon", top_k=5, mode="hybrid")
    finally:
        ranking.unregister_ranker("fixed-test")
    assert names(after)[0] == "moon.txt"  # first in two lists of three
    assert "giraffes.txt" in names(after)
    assert [hit.filename for hit in chunk_search(owner_id=owner.pk, query="Moon", mode="hybrid")] == names(before)


def test_fusion_arithmetic():
    assert ranking.fuse_rrf([[(1, 0.9), (2, 0.5)], [(2, 7.0), (3, 1.0)]], 3, rrf_k=60) == [
        (2, 1 / 62 + 1 / 61), (1, 1 / 61), (3, 1 / 62)]
    assert ranking.fuse_rrf([[], []], 5) == []
    assert ranking.fuse_weighted([[(1, 0.8), (2, 0.4)], [(2, 10.0)]], 2) == [(2, 1.5), (1, 1.0)]
    assert ranking.fuse_weighted([[(1, 0.8), (2, 0.4)], [(2, 10.0)]], 2, weights=[1.0, 0.2]) == [(1, 1.0), (2, 0.7)]


@pytest.mark.parametrize("mode", ["hybrid", "lexical", "vector"])
def test_the_api_takes_a_mode_and_answers_score_and_rank_score(owner_client, corpus, mode):
    response = owner_client.post("/api/kb/search", {"query": "kneading bread dough", "topK": 3, "mode": mode},
                                 format="json")
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert results[0]["document"]["filename"] == "bread.txt"
    assert set(results[0]) == {"chunk", "score", "rank_score", "document", "collection"}
    ranks = [result["rank_score"] for result in results]
    assert ranks == sorted(ranks, reverse=True)


def test_the_api_refuses_an_unknown_mode(owner_client, corpus):
    response = owner_client.post("/api/kb/search", {"query": "bread", "mode": "semantic"}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"
    assert "mode" in response.json()["error"]["details"]
    context = owner_client.post("/api/kb/context", {"query": "bread", "mode": "dense?"}, format="json")
    assert context.status_code == 400


def test_a_word_in_too_many_chunks_is_left_out_of_the_lexical_query(owner, monkeypatch):
    """The same rule on SQLite and PostgreSQL (docs/api.md): a word in more than COMMON_CHUNKS is left out."""
    monkeypatch.setattr(lexical, "COMMON_CHUNKS", 3)  # 2,000 in production: what bounds a search's work
    for number in range(6):
        add(owner, f"common{number}.txt", f"Widgets everywhere, widget number {number}.")
    add(owner, "rare.txt", "A sprocket and a widget.")
    hits = chunk_search(owner_id=owner.pk, query="widget sprocket", top_k=10, mode="lexical")
    only_common = chunk_search(owner_id=owner.pk, query="widget", top_k=10, mode="lexical")
    assert names(hits) == ["rare.txt"]  # "widget" (7 chunks) is left out; "sprocket" ranks
    assert only_common == []  # every word is common and more than 3 chunks hold them all
    assert names(chunk_search(owner_id=owner.pk, query="widget", top_k=10, mode="hybrid"))  # vectors still rank
    assert names(chunk_search(owner_id=owner.pk, query="sprocket widget number", top_k=10,
                              mode="lexical")) == ["rare.txt"]
    monkeypatch.setattr(lexical, "COMMON_CHUNKS", 10)
    assert len(chunk_search(owner_id=owner.pk, query="widget", top_k=10, mode="lexical")) == 7


def test_common_words_with_one_rare_word_rank_the_rare_chunk_and_the_common_words_weigh_nothing(owner, monkeypatch):
    """Only very common words plus one rare word: the rare word's chunk is first and the common words are dropped
    (its score is the rare word's alone); all-common words rank the chunks holding all of them when few."""
    monkeypatch.setattr(lexical, "COMMON_CHUNKS", 4)
    for number in range(8):
        add(owner, f"common{number}.txt", f"Gadget and gizmo in paragraph {number}, gadget gizmo again.")
    add(owner, "both.txt", "A gadget beside a gizmo and a gizmo beside a gadget.")
    add(owner, "rare.txt", "A flange, one gadget, one gizmo.")
    add(owner, "other.txt", "Nothing shared here at all.")
    mixed = lexical.lexical_rank(owner.pk, "gadget gizmo flange", 10)
    rare_only = lexical.lexical_rank(owner.pk, "flange", 10)
    assert [chunk for chunk, _ in mixed] == [chunk for chunk, _ in rare_only] and len(mixed) == 1
    assert mixed[0][1] == pytest.approx(rare_only[0][1])  # gadget and gizmo (10 chunks each) add nothing
    assert names(chunk_search(owner_id=owner.pk, query="gadget gizmo flange", top_k=3, mode="lexical")) == ["rare.txt"]
    assert lexical.lexical_rank(owner.pk, "gadget gizmo", 10) == []  # 10 chunks hold both: more than 4
    monkeypatch.setattr(lexical, "COMMON_CHUNKS", 9)  # both words are still common (10 chunks), all 10 hold both
    assert lexical.lexical_rank(owner.pk, "gadget gizmo", 20) == []
    monkeypatch.setattr(lexical, "COMMON_CHUNKS", 10)  # neither is common now: every chunk holding one ranks
    assert len(lexical.lexical_rank(owner.pk, "gadget gizmo", 20)) == 10

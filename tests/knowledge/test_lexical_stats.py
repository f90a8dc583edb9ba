"""PostgreSQL: each owner's lexical statistics row (knowledge_lexicalstats, migration 0005), chunk count per
lexeme (knowledge_lexicalterms, migration 0006) and postings (knowledge_lexicalpostings, migration 0007) always
equal what the owner's index rows hold, through adds, deletes, a clear, a chunk deleted by the admin, and a
TRUNCATE."""

from __future__ import annotations

import pytest
from django.db import connection

from knowledge import lexical, services
from knowledge.models import Chunk
from tests.knowledge.test_search import CORPUS

pytestmark = pytest.mark.django_db


def stats() -> dict[int, tuple[int, int]]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT owner_id, chunks, length FROM {lexical.PG_STATS} WHERE chunks > 0")
        kept = {row[0]: (row[1], row[2]) for row in cursor.fetchall()}
        cursor.execute(f"SELECT owner_id, count(*), sum(length) FROM {lexical.PG_TABLE} GROUP BY owner_id")
        counted = {row[0]: (row[1], row[2]) for row in cursor.fetchall()}
        cursor.execute(f"SELECT owner_id, lexeme, chunks FROM {lexical.PG_TERMS}")
        kept_terms = sorted(cursor.fetchall())
        cursor.execute(f"SELECT owner_id, u.lexeme, count(*) FROM {lexical.PG_TABLE}, unnest(terms) AS u "
                       "GROUP BY owner_id, u.lexeme")
        counted_terms = sorted(cursor.fetchall())
        cursor.execute(f"SELECT owner_id, lexeme, chunk_id, tf, length FROM {lexical.PG_POSTINGS}")
        postings = sorted(cursor.fetchall())
        cursor.execute(f"SELECT owner_id, u.lexeme, chunk_id, coalesce(array_length(u.positions, 1), 1), length "
                       f"FROM {lexical.PG_TABLE}, unnest(terms) AS u")
        indexed = sorted(cursor.fetchall())
    assert kept == counted
    assert kept_terms == counted_terms  # no row left at 0 either
    assert postings == indexed
    return kept


def test_the_statistics_follow_every_write(owner, other_user):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only: SQLite's FTS5 keeps its own statistics")
    documents = [services.document_ingest(owner_id=owner.pk, filename=name, content=text)
                 for name, text in CORPUS.items()]
    services.document_ingest(owner_id=other_user.pk, filename="x.txt", content="Penguins swim. " * 200)
    before = stats()
    assert before[owner.pk][0] == Chunk.objects.filter(document__owner_id=owner.pk).count()
    services.document_delete(owner_id=owner.pk, document_id=documents[0].pk)
    assert stats()[owner.pk][0] < before[owner.pk][0]
    Chunk.objects.filter(document__owner_id=other_user.pk).first().delete()  # as the admin does
    assert stats()[other_user.pk][0] == before[other_user.pk][0] - 1
    services.documents_clear(owner_id=owner.pk)
    assert owner.pk not in stats()
    hits = lexical.lexical_rank(other_user.pk, "penguins", 3)
    assert hits and all(score > 0 for _, score in hits)
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {lexical.PG_TABLE}")  # what a TRUNCATE of knowledge_chunk does to the index
    assert stats() == {}


def _bm25_of_the_index(owner_id: int, words: list[str]) -> dict[int, float]:
    """BM25 (k1, b of knowledge.lexical) of the owner's chunks for the query words' lexemes that are not
    common, computed here from each chunk's tsvector: what the postings must give."""
    import math

    with connection.cursor() as cursor:
        cursor.execute("SELECT tsvector_to_array(to_tsvector('english', %s))", [" ".join(words)])
        lexemes = set(cursor.fetchone()[0])
        cursor.execute(f"SELECT chunk_id, length, u.lexeme, coalesce(array_length(u.positions, 1), 1) "
                       f"FROM {lexical.PG_TABLE}, unnest(terms) AS u WHERE owner_id = %s", [owner_id])
        rows = cursor.fetchall()
    lengths = {chunk_id: length for chunk_id, length, _, _ in rows}
    n, avglen = len(lengths), sum(lengths.values()) / len(lengths)
    df: dict[str, int] = {}
    for _, _, lexeme, _ in rows:
        df[lexeme] = df.get(lexeme, 0) + 1
    kept = {lexeme for lexeme in lexemes if 0 < df.get(lexeme, 0) <= lexical.COMMON_CHUNKS}
    scores: dict[int, float] = {}
    k1, b = lexical.BM25_K1, lexical.BM25_B
    for chunk_id, length, lexeme, tf in rows:
        if lexeme in kept:
            idf = math.log(1 + (n - df[lexeme] + 0.5) / (df[lexeme] + 0.5))
            scores[chunk_id] = scores.get(chunk_id, 0.0) + idf * tf * (k1 + 1) / (
                tf + k1 * (1 - b + b * length / max(avglen, 1)))
    return scores


@pytest.mark.parametrize("query", ["When did astronauts land on the Moon?", "bake bread bake the dough hot",
                                   "penguins swim in cold oceans", "giraffes", "Moon moon landed Earth days"])
def test_postgresql_ranks_by_bm25_of_the_indexed_words(owner, other_user, query):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only: SQLite's FTS5 computes its own bm25()")
    for name, text in CORPUS.items():
        services.document_ingest(owner_id=owner.pk, filename=name, content=text * 3)
    services.document_ingest(owner_id=other_user.pk, filename="moon.txt", content="The Moon, the Moon. " * 50)
    expected = _bm25_of_the_index(owner.pk, lexical.query_terms(query))
    got = lexical.lexical_rank(owner.pk, query, 50)
    assert expected and len(got) == len(expected)
    assert {chunk_id for chunk_id, _ in got} == set(expected)
    for chunk_id, score in got:
        assert score == pytest.approx(expected[chunk_id], rel=1e-9)
    assert [score for _, score in got] == sorted((score for _, score in got), reverse=True)

"""PostgreSQL: each owner's lexical statistics row (knowledge_lexicalstats, migration 0005) and chunk count per
lexeme (knowledge_lexicalterms, migration 0006) always equal a count of the owner's index rows, through adds,
deletes, a clear, a chunk deleted by the admin, and a TRUNCATE."""

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
    assert kept == counted
    assert kept_terms == counted_terms  # no row left at 0 either
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

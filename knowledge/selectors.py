"""Reads of the knowledge base: the document list, similarity search, and the prompt context."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import numpy as np
from django.db import connection
from django.db.models import Count, QuerySet

from knowledge import index
from knowledge.embedding import embed
from knowledge.models import Chunk, Document

CONTEXT_SEPARATOR = "\n\n"


@dataclass(frozen=True)
class ChunkHit:
    chunk_id: int
    index: int  # the chunk's position in its document
    text: str
    score: float  # cosine similarity with the query, in (0, 1]
    document_id: uuid.UUID
    filename: str

    def as_source(self) -> dict:
        """The form recorded on an assistant message (the `sources` of a context block)."""
        return {"document_id": str(self.document_id), "filename": self.filename, "chunk_index": self.index,
                "score": self.score}


@dataclass(frozen=True)
class KnowledgeContext:
    text: str  # `[filename] chunk` entries, best first, within the character budget
    hits: list[ChunkHit]  # the chunks that appear in text, in the same order


def document_list_for(*, owner_id: int) -> QuerySet[Document]:
    """The owner's documents, newest first, each with `chunk_count`; without the (large) content."""
    return (Document.objects.filter(owner_id=owner_id).defer("content")
            .annotate(chunk_count=Count("chunks")).order_by("-created_at", "id"))


def chunk_search(*, owner_id: int, query: str, top_k: int = 5) -> list[ChunkHit]:
    """The owner's chunks most similar to query, best first: at most top_k, only positive scores."""
    query_vector = embed(query)
    matrix = index.matrix_for(owner_id)
    if matrix.size == 0 or top_k < 1 or not query_vector.any():
        return []
    rows, scores = top_rows(matrix.vectors, query_vector, top_k)
    positive = scores > 0  # a chunk sharing no word with the query is not a match, however few there are
    return _hits(matrix.ids[rows[positive]], scores[positive])


def top_rows(vectors: np.ndarray, query_vector: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of the top_k highest dot products with query_vector and their scores, best first."""
    scores = vectors @ query_vector
    k = min(top_k, len(scores))
    rows = np.argpartition(scores, len(scores) - k)[len(scores) - k:] if k < len(scores) else np.arange(k)
    rows = rows[np.argsort(-scores[rows], kind="stable")]
    return rows, scores[rows]


def _hits(chunk_ids: np.ndarray, scores: np.ndarray) -> list[ChunkHit]:
    wanted = [int(chunk_id) for chunk_id in chunk_ids]
    by_id = {row[0]: row for row in _chunk_rows(wanted)}
    hits = []
    for chunk_id, score in zip(wanted, scores.tolist(), strict=True):
        row = by_id.get(chunk_id)
        if row is not None:  # deleted by another process since the matrix was checked
            hits.append(ChunkHit(chunk_id, row[1], row[2], round(min(score, 1.0), 6), index.as_uuid(row[3]), row[4]))
    return hits


def _chunk_rows(chunk_ids: list[int]) -> list[tuple]:
    """(id, index, text, document_id, filename) of the given chunks, in no particular order."""
    if not chunk_ids:
        return []
    # Every search runs this: plain SQL costs a fraction of what building the ORM query does (bench/kb.py).
    quote = connection.ops.quote_name
    chunk, document = quote(Chunk._meta.db_table), quote(Document._meta.db_table)
    placeholders = ", ".join(["%s"] * len(chunk_ids))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT c.{quote('id')}, c.{quote('index')}, c.{quote('text')}, c.{quote('document_id')}, "
            f"d.{quote('filename')} FROM {chunk} c JOIN {document} d ON d.{quote('id')} = c.{quote('document_id')} "
            f"WHERE c.{quote('id')} IN ({placeholders})", chunk_ids)
        return cursor.fetchall()


def context_build(*, owner_id: int, query: str, max_chars: int, top_k: int = 5) -> KnowledgeContext:
    """The best chunks for query as `[filename] text` entries, best first, joined, cut to max_chars.

    The entry that reaches the budget is cut there; it is left out instead when not even its
    `[filename] ` header and one character of text would fit.
    """
    parts: list[str] = []
    used: list[ChunkHit] = []
    remaining = max_chars
    for hit in chunk_search(owner_id=owner_id, query=query, top_k=top_k):
        header = f"{CONTEXT_SEPARATOR if parts else ''}[{hit.filename}] "
        if remaining <= len(header):
            break
        parts.append((header + hit.text)[:remaining])
        used.append(hit)
        remaining -= len(parts[-1])
    return KnowledgeContext("".join(parts), used)

"""Reads of the knowledge base: the document list, similarity search, and the prompt context."""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass

import numpy as np
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Count, QuerySet, Sum

from agentsite.core.errors import AppError
from knowledge import dense, index, ranking
from knowledge.embedding import embed, from_bytes
from knowledge.models import Chunk, Document, KnowledgeStamp
from knowledge.ranking import Ranker

CONTEXT_SEPARATOR = "\n\n"
MODES = ("hybrid", "lexical", "vector", "dense")  # dense: only with the dense model installed (knowledge/dense.py)
DEFAULT_MODE = "hybrid"


@dataclass(frozen=True)
class ChunkHit:
    chunk_id: int
    index: int  # the chunk's position in its document
    text: str
    score: float  # cosine similarity with the query: in (0, 1] in mode vector, in [-1, 1] otherwise
    document_id: uuid.UUID
    filename: str
    rank_score: float = 0.0  # what the order follows: the fused score (hybrid), BM25 (lexical), cosine (vector)

    def as_source(self) -> dict:
        """The form recorded on an assistant message (the `sources` of a context block)."""
        return {"document_id": str(self.document_id), "filename": self.filename, "chunk_index": self.index,
                "score": self.score, "rank_score": self.rank_score}


@dataclass(frozen=True)
class KnowledgeContext:
    text: str  # `[filename] chunk` entries, best first, within the character budget
    hits: list[ChunkHit]  # the chunks that appear in text, in the same order


def document_list_for(*, owner_id: int) -> QuerySet[Document]:
    """The owner's documents, newest first, each with `chunk_count`; without the (large) content."""
    return (Document.objects.filter(owner_id=owner_id).defer("content")
            .annotate(chunk_count=Count("chunks")).order_by("-created_at", "id"))


def kb_usage_for(*, owner_id: int) -> int:
    """The bytes the owner's documents hold, as the knowledge-base quota counts them (Document.stored_bytes)."""
    return Document.objects.filter(owner_id=owner_id).aggregate(used=Sum("stored_bytes"))["used"] or 0


def offered_modes() -> list[str]:
    """The modes to offer a user (the kb_search tool, the Knowledge page): MODES less `dense` unless the dense
    model is installed and on (knowledge/dense.py). The default first."""

    return [mode for mode in MODES if mode != "dense" or (ranking.ranker("dense") is not None and dense.available())]


def chunk_search(*, owner_id: int, query: str, top_k: int = 5, mode: str = DEFAULT_MODE) -> list[ChunkHit]:
    """The owner's chunks that best match query, best first (by rank_score), at most top_k.

    mode `vector`: the cosine similarity of the word-hash vectors, only positive scores (the seed's rule);
    `lexical`: BM25 over the lexical index (knowledge.lexical); `hybrid`: every registered ranker
    (knowledge.ranking) fused. Each hit's `score` is its cosine similarity in every mode.
    Raises AppError 400 `invalid` for an unknown mode.
    """
    if mode == "vector":
        return vector_search(owner_id=owner_id, query=query, top_k=top_k)
    if mode == "hybrid":
        rankers = ranking.rankers()
    elif mode in MODES and (one := ranking.ranker(mode)) is not None:
        rankers = [one]
    elif mode == "dense":
        raise AppError("invalid", f"mode dense needs the dense embedding model, which is not installed on this "
                       f"server ({dense.INSTALL_HINT}).", 400, {"mode": ["The dense model is not installed."]})
    else:
        raise AppError("invalid", f"mode must be one of: {', '.join(MODES)}.", 400,
                       {"mode": [f"Choose one of: {', '.join(MODES)}."]})
    if top_k < 1 or _known_empty(owner_id):
        return []
    ranked = ranking.fuse(rankers, owner_id, query, top_k) if len(rankers) > 1 else rankers[0].rank(
        owner_id, query, top_k)
    return _ranked_hits(owner_id, ranked, embed(query))


def _known_empty(owner_id: int) -> bool:
    """True when the owner's cached matrix is empty and still current (one stamp read): no chunk at all, so no
    ranker can find one (a chat turn asks on every message, most users have no documents). Not cached yet:
    False, and the rankers look (the vector ranker caches the matrix)."""
    cached = index.cached_matrix(owner_id)
    return cached is not None and cached.size == 0 and cached.stamp == index.stamp_current(owner_id)


def _ranked_hits(owner_id: int, ranked: ranking.Ranking, query_vector: np.ndarray) -> list[ChunkHit]:
    """The hits of a ranking, in its order, each with its cosine similarity (read from the chunk's stored vector)."""
    if not ranked:
        return []
    db = connections[DEFAULT_DB_ALIAS]
    with db.cursor() as cursor:
        cursor.execute(_ranked_rows_sql(db.vendor, len(ranked)), [owner_id, *(chunk_id for chunk_id, _ in ranked)])
        by_id = {row[0]: row for row in cursor.fetchall()}
    hits = []
    for chunk_id, rank_score in ranked:
        row = by_id.get(chunk_id)
        if row is None:  # deleted since it was ranked
            continue
        cosine = float(from_bytes(row[5]) @ query_vector)
        hits.append(ChunkHit(chunk_id, row[1], row[2], round(min(cosine, 1.0), 6), index.as_uuid(row[3]), row[4],
                             round(rank_score, 6)))
    return hits


@functools.lru_cache(maxsize=64)
def _ranked_rows_sql(vendor: str, count: int) -> str:
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    chunk, document = quote(Chunk._meta.db_table), quote(Document._meta.db_table)
    return (f"SELECT c.{quote('id')}, c.{quote('index')}, c.{quote('text')}, c.{quote('document_id')}, "
            f"d.{quote('filename')}, c.{quote('vector')} FROM {chunk} c JOIN {document} d ON d.{quote('id')} = "
            f"c.{quote('document_id')} WHERE d.{quote('owner_id')} = %s AND c.{quote('id')} IN "
            f"({', '.join(['%s'] * count)})")


class VectorRanker(Ranker):
    """The cosine similarity of the word-hash vectors, from the owner's matrix (knowledge.index)."""

    name = "vector"
    weight = 0.2  # in hybrid fusion (knowledge.ranking: chosen by bench/retrieval.py)

    def rank(self, owner_id: int, query: str, k: int) -> ranking.Ranking:
        query_vector = embed(query)
        if k < 1 or not query_vector.any():
            return []
        matrix = index.matrix_for(owner_id)
        if matrix.size == 0:
            return []
        chunk_ids, scores = _ranked(matrix, query_vector, k)
        return list(zip(chunk_ids, scores, strict=True))


def vector_search(*, owner_id: int, query: str, top_k: int = 5) -> list[ChunkHit]:
    """The owner's chunks most similar to query, best first: at most top_k, only positive scores."""
    query_vector = embed(query)
    cached = index.cached_matrix(owner_id)
    if cached is not None and cached.size and top_k >= 1 and query_vector.any():
        # The usual case, in one statement: rank with the cached matrix, then read the hits' rows together
        # with the owner's stamp. When the stamp still labels the matrix, the ranking was current.
        chunk_ids, scores = _ranked(cached, query_vector, top_k)
        stamp, rows = _rows_and_stamp(owner_id, chunk_ids)
        if stamp == cached.stamp:
            return _hits(chunk_ids, scores, rows)
    matrix = index.matrix_for(owner_id)  # another process wrote (or nothing is cached yet): bring it up to date
    if matrix.size == 0 or top_k < 1 or not query_vector.any():
        return []
    chunk_ids, scores = _ranked(matrix, query_vector, top_k)
    return _hits(chunk_ids, scores, _chunk_rows(chunk_ids))


def _ranked(matrix: index.OwnerMatrix, query_vector: np.ndarray, top_k: int) -> tuple[list[int], list[float]]:
    """The ids and scores of the matrix's top_k chunks with a positive score, best first."""
    rows, scores = top_rows(matrix.vectors, query_vector, top_k)
    if scores[-1] <= 0:  # best first: only then are some not positive
        positive = scores > 0  # a chunk sharing no word with the query is not a match, however few there are
        rows, scores = rows[positive], scores[positive]
    return matrix.ids[rows].tolist(), scores.tolist()


def top_rows(vectors: np.ndarray, query_vector: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of the top_k highest dot products with query_vector and their scores, best first."""
    scores = vectors @ query_vector
    k = min(top_k, len(scores))
    rows = np.argpartition(scores, len(scores) - k)[len(scores) - k:] if k < len(scores) else np.arange(k)
    rows = rows[np.argsort(-scores[rows], kind="stable")]
    return rows, scores[rows]


def _hits(chunk_ids: list[int], scores: list[float], rows: list[tuple]) -> list[ChunkHit]:
    by_id = {row[0]: row for row in rows}
    hits = []
    for chunk_id, score in zip(chunk_ids, scores, strict=True):
        row = by_id.get(chunk_id)
        if row is not None:  # deleted by another process since the matrix was checked
            score = round(min(score, 1.0), 6)
            hits.append(ChunkHit(chunk_id, row[1], row[2], score, index.as_uuid(row[3]), row[4], score))
    return hits


# Every search runs one of these statements: plain SQL built once per database vendor and number of ids, since
# building an ORM query (or even quoting the names again) costs more than SQLite takes to answer it.
@functools.lru_cache(maxsize=64)
def _rows_sql(vendor: str, count: int, with_stamp: bool) -> str:
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    chunk, document = quote(Chunk._meta.db_table), quote(Document._meta.db_table)
    stamp = (f", (SELECT {quote('value')} FROM {quote(KnowledgeStamp._meta.db_table)} "
             f"WHERE {quote('owner_id')} = %s)" if with_stamp else "")
    return (f"SELECT c.{quote('id')}, c.{quote('index')}, c.{quote('text')}, c.{quote('document_id')}, "
            f"d.{quote('filename')}{stamp} FROM {chunk} c JOIN {document} d ON d.{quote('id')} = "
            f"c.{quote('document_id')} WHERE c.{quote('id')} IN ({', '.join(['%s'] * count)})")


def _chunk_rows(chunk_ids: list[int]) -> list[tuple]:
    """(id, index, text, document_id, filename) of the given chunks, in no particular order."""
    if not chunk_ids:
        return []
    return _fetch_all(False, chunk_ids, len(chunk_ids))


def _rows_and_stamp(owner_id: int, chunk_ids: list[int]) -> tuple[int, list[tuple]]:
    """The owner's stamp and the rows of _chunk_rows, read in one statement (so both are of one moment)."""
    if not chunk_ids:
        return index.stamp_current(owner_id), []
    rows = _fetch_all(True, [owner_id, *chunk_ids], len(chunk_ids))
    if not rows:  # every hit was deleted meanwhile, which changed the stamp: read it on its own
        return index.stamp_current(owner_id), []
    return rows[0][5] or 0, rows


def _fetch_all(with_stamp: bool, params: list[int], count: int) -> list[tuple]:
    db = connections[DEFAULT_DB_ALIAS]
    statement = _driver_sql(db.vendor, count, with_stamp)
    if statement is None:
        with db.cursor() as cursor:
            cursor.execute(_rows_sql(db.vendor, count, with_stamp), params)
            return cursor.fetchall()
    # Straight to the driver's cursor, past Django's wrapper (which costs as much as SQLite takes to answer):
    # the same connection and transaction, the same error translation; the statement just is not logged.
    db.ensure_connection()
    with db.wrap_database_errors:
        cursor = db.connection.cursor()
        try:
            cursor.execute(statement, params)
            return cursor.fetchall()
        finally:
            cursor.close()


_DRIVER_PLACEHOLDERS = {"sqlite": "?", "postgresql": "%s"}  # the drivers' own parameter styles


@functools.lru_cache(maxsize=64)
def _driver_sql(vendor: str, count: int, with_stamp: bool) -> str | None:
    """_rows_sql in the driver's parameter style; None for another database (which gets Django's cursor)."""
    placeholder = _DRIVER_PLACEHOLDERS.get(vendor)
    return None if placeholder is None else _rows_sql(vendor, count, with_stamp).replace("%s", placeholder)


def context_build(*, owner_id: int, query: str, max_chars: int, top_k: int = 5,
                  mode: str = DEFAULT_MODE) -> KnowledgeContext:
    """The best chunks for query as `[filename] text` entries, best first, joined, cut to max_chars.

    The entry that reaches the budget is cut there; it is left out instead when not even its
    `[filename] ` header and one character of text would fit.
    """
    parts: list[str] = []
    used: list[ChunkHit] = []
    remaining = max_chars
    for hit in chunk_search(owner_id=owner_id, query=query, top_k=top_k, mode=mode):
        header = f"{CONTEXT_SEPARATOR if parts else ''}[{hit.filename}] "
        if remaining <= len(header):
            break
        parts.append((header + hit.text)[:remaining])
        used.append(hit)
        remaining -= len(parts[-1])
    return KnowledgeContext("".join(parts), used)

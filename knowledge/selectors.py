"""Reads of the knowledge base: collections, the document list, similarity search, and the prompt context.

A search covers one collection or several (each ranker's best of each, merged into one ranking); the caller
has checked that the user may read each (organisation.policy), or searches the user's personal collection.
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from django.core.exceptions import ValidationError
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Count, IntegerField, OuterRef, Q, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from agentsite.core.errors import AppError
from agentsite.core.kept import Kept
from knowledge import dense, index, ranking
from knowledge.embedding import embed, from_bytes
from knowledge.models import Chunk, Collection, CollectionGrant, Document, KnowledgeStamp
from knowledge.ranking import Ranker
from organisation.models import EVERYONE, VIEWER
from organisation.policy import _RANK, OWNER, visible_q

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

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
    collection_id: uuid.UUID | None = None
    collection_name: str = ""

    def as_source(self) -> dict:
        """The form recorded on an assistant message (the `sources` of a context block): the passage as the
        model received it, with where it came from."""
        collection = ({"id": str(self.collection_id), "name": self.collection_name}
                      if self.collection_id else None)
        return {"collection": collection, "document": {"id": str(self.document_id), "filename": self.filename},
                "chunk_index": self.index, "score": self.score, "rank_score": self.rank_score, "text": self.text}


@dataclass(frozen=True)
class KnowledgeContext:
    text: str  # `[filename] chunk` entries, best first, within the character budget
    hits: list[ChunkHit]  # the chunks that appear in text, in the same order (a chunk cut there: its text as cut)


MAX_COLLECTIONS = 50  # named by one search


# Whether a user has a personal collection: every turn of the agent `default` asks, and most users have none,
# which then costs no query. A save or delete of a personal collection calls has_personal.changed(owner_id)
# (knowledge.apps); one that stops being personal (a transfer) leaves a kept True, which costs one query.
PERSONAL_TOPIC = "knowledge.personal"
has_personal: Kept[bool] = Kept(
    PERSONAL_TOPIC, lambda owner_id: Collection.objects.filter(owner_id=owner_id, personal=True).exists(), ttl=60.0)


def personal_collection_of(owner_id: int | None) -> Collection | None:
    """The user's personal collection, or None before their first use of it (services.collection_personal
    makes it)."""
    if owner_id is None:
        return None
    return Collection.objects.filter(owner_id=owner_id, personal=True).first()


def personal_collection_for_turn(owner_id: int | None) -> Collection | None:
    """personal_collection_of for a turn's context: no query for a user who has none while has_personal keeps
    that. The write paths ask personal_collection_of, which a change in another process cannot race."""
    if owner_id is None or not has_personal.get(owner_id):
        return None
    return personal_collection_of(owner_id)


def collection_get_for(user: AbstractBaseUser, collection_id: uuid.UUID | str) -> Collection:
    """A collection the user holds a role on (the caller then `require`s the action); AppError 404 otherwise."""
    try:
        collection = Collection.objects.filter(pk=collection_id).select_related("owner").first()
    except (ValueError, TypeError, ValidationError):
        collection = None
    if collection is None:
        raise AppError("not_found", "No knowledge collection with that id.", 404)
    return collection


def collections_readable(user: AbstractBaseUser, ids: Sequence[uuid.UUID]) -> list[Collection]:
    """The named collections, in the order named (repeats once), when the user may read every one; otherwise
    AppError 404 naming the first that is unknown or unreadable (which of the two is never told). One query."""
    ids = list(dict.fromkeys(ids))
    if len(ids) > MAX_COLLECTIONS:
        raise AppError("invalid", f"Name at most {MAX_COLLECTIONS} collections.", 400,
                       {"collections": [f"At most {MAX_COLLECTIONS}."]})
    found = {collection.pk: collection for collection in
             Collection.objects.filter(pk__in=ids).filter(visible_q(user, Collection, every_object_for_admins=True))}
    for collection_id in ids:
        if collection_id not in found:
            raise AppError("not_found", f"No knowledge collection {collection_id} (or none you may read).", 404,
                           {"collections": [f"No collection {collection_id}."]})
    return [found[collection_id] for collection_id in ids]


def _count_of(queryset: QuerySet, field: str) -> Coalesce:
    counted = queryset.values(field).annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(counted, output_field=IntegerField()), Value(0))


def collection_list_for(user: AbstractBaseUser) -> QuerySet[Collection]:
    """The collections the user may read (owned, `everyone`, granted), personal first then by name, each with
    `document_count`, `chunk_count` and `grants_count` (a subquery each: no join multiplies the rows)."""
    return with_counts(Collection.objects.filter(visible_q(user, Collection))).order_by("-personal", "name", "id")


def with_counts(collections: QuerySet[Collection]) -> QuerySet[Collection]:
    return collections.select_related("owner").annotate(
        document_count=_count_of(Document.objects.filter(collection=OuterRef("pk")), "collection"),
        chunk_count=_count_of(Chunk.objects.filter(document__collection=OuterRef("pk")), "document__collection"),
        grants_count=_count_of(CollectionGrant.objects.filter(resource=OuterRef("pk")), "resource"))


def roles_of(user: AbstractBaseUser, collections: Sequence[Collection]) -> dict[uuid.UUID, str]:
    """The user's role on each collection (owner, editor, viewer), as organisation.policy.role_of gives it, for
    a whole listing in one query."""
    roles: dict[uuid.UUID, str] = {}
    others = []
    for collection in collections:
        if user.is_staff or collection.owner_id == user.pk:
            roles[collection.pk] = OWNER
        else:
            others.append(collection)
            if collection.visibility == EVERYONE:
                roles[collection.pk] = VIEWER
    if others:
        granted = CollectionGrant.objects.filter(resource__in=[collection.pk for collection in others]).filter(
            Q(user_id=user.pk) | Q(group__memberships__user_id=user.pk)).values_list("resource_id", "role")
        for collection_id, role in granted:
            if _RANK.get(role, 0) > _RANK.get(roles.get(collection_id, ""), 0):
                roles[collection_id] = role
    return roles


def document_list_for(*, collection: Collection | None = None, owner_id: int | None = None) -> QuerySet[Document]:
    """The collection's documents (owner_id: the user's personal collection's), newest first, each with
    `chunk_count`; without the (large) content."""
    if collection is None:
        collection = personal_collection_of(owner_id)
        if collection is None:
            return Document.objects.none()
    return (Document.objects.filter(collection=collection).defer("content")
            .annotate(chunk_count=Count("chunks")).order_by("-created_at", "id"))


def kb_usage_for(*, owner_id: int) -> int:
    """The bytes the documents of the collections a user owns hold, as the knowledge-base quota counts them
    (Document.stored_bytes), whoever added them."""
    used = Document.objects.filter(collection__owner_id=owner_id).aggregate(used=Sum("stored_bytes"))["used"]
    return used or 0


def offered_modes() -> list[str]:
    """The modes to offer a user (the kb_search tool, the Knowledge page): MODES less `dense` unless the dense
    model is installed and on (knowledge/dense.py). The default first."""

    return [mode for mode in MODES if mode != "dense" or (ranking.ranker("dense") is not None and dense.available())]


def chunk_search(*, owner_id: int | None = None, query: str, top_k: int = 5, mode: str = DEFAULT_MODE,
                 collections: Sequence[Collection] | None = None) -> list[ChunkHit]:
    """The chunks of the collections that best match query, best first (by rank_score), at most top_k, in one
    ranking across them; each hit names its collection.

    collections: those to search (the caller checked the user may read each: collections_readable); None:
    owner_id's personal collection (nothing before its first use).
    mode `vector`: the cosine similarity of the word-hash vectors, only positive scores (the seed's rule);
    `lexical`: BM25 over the lexical index (knowledge.lexical); `hybrid`: every registered ranker
    (knowledge.ranking) fused. Over several collections each ranker gives each collection's best, merged by
    score, before the fusion. Each hit's `score` is its cosine similarity in every mode.
    Raises AppError 400 `invalid` for an unknown mode.
    """
    rankers = _rankers_for(mode)
    if collections is None:
        personal = personal_collection_of(owner_id)
        collections = [] if personal is None else [personal]
    if not collections or top_k < 1:
        return []
    keys = [collection.key for collection in collections]
    if mode == "vector":
        hits = (vector_search(owner_id=keys[0], query=query, top_k=top_k) if len(keys) == 1
                else _vector_search_many(keys, query, top_k))
    else:
        if len(keys) == 1:
            if _known_empty(keys[0]):
                return []
            ranked = ranking.fuse(rankers, keys[0], query, top_k) if len(rankers) > 1 else rankers[0].rank(
                keys[0], query, top_k)
        else:
            stamps = index.stamps_current(keys)
            keys = [key for key in keys if not _known_empty(key, stamps[key])]
            with index.stamps_known(stamps):  # the vector and dense rankers read no stamp again
                ranked = (ranking.fuse_many(rankers, keys, query, top_k) if len(rankers) > 1 else
                          rankers[0].rank_many(keys, query, top_k))
        hits = _ranked_hits([collection.pk for collection in collections], ranked, embed(query))
    names = {collection.pk: collection.name for collection in collections}
    return [dataclasses.replace(hit, collection_name=names.get(hit.collection_id, "")) for hit in hits]


def _rankers_for(mode: str) -> list[Ranker]:
    """The rankers of a mode ([] for `vector`, which has its own path); AppError 400 `invalid` for another."""
    if mode == "vector":
        return []
    if mode == "hybrid":
        return ranking.rankers()
    if mode in MODES and (one := ranking.ranker(mode)) is not None:
        return [one]
    if mode == "dense":
        raise AppError("invalid", f"mode dense needs the dense embedding model, which is not installed on this "
                       f"server ({dense.INSTALL_HINT}).", 400, {"mode": ["The dense model is not installed."]})
    raise AppError("invalid", f"mode must be one of: {', '.join(MODES)}.", 400,
                   {"mode": [f"Choose one of: {', '.join(MODES)}."]})


def _known_empty(owner_id: int, stamp: int | None = None) -> bool:
    """True when the collection's cached matrix is empty and still current (one stamp read, unless the caller
    read it: `stamp`): no chunk at all, so no ranker can find one (a chat turn asks on every message, most
    users have no documents). Not cached yet: False, and the rankers look (the vector ranker caches the
    matrix)."""
    cached = index.cached_matrix(owner_id)
    if cached is None or cached.size != 0:
        return False
    return cached.stamp == (index.stamp_current(owner_id) if stamp is None else stamp)


def _vector_search_many(keys: list[int], query: str, top_k: int) -> list[ChunkHit]:
    """vector_search over several collections: each one's top_k, merged by cosine."""
    query_vector = embed(query)
    if not query_vector.any():
        return []
    stamps = index.stamps_current(keys)
    matrices = [index.matrix_for(key, stamp=stamps[key]) for key in keys if not _known_empty(key, stamps[key])]
    chunk_ids, scores = _ranked_many(matrices, query_vector, top_k)
    return _hits(chunk_ids, scores, _chunk_rows(chunk_ids))


def _ranked_many(matrices: list[index.OwnerMatrix], query_vector: np.ndarray,
                 top_k: int) -> tuple[list[int], list[float]]:
    """_ranked over several matrices at once: one product each, one top_k over all their scores (the same
    chunks as merging each one's top_k)."""
    matrices = [matrix for matrix in matrices if matrix.size]
    if not matrices:
        return [], []
    if len(matrices) == 1:
        return _ranked(matrices[0], query_vector, top_k)
    # Each product written into its slice of one array (no copy of the scores, none of the ids).
    offsets = np.cumsum([0, *(matrix.size for matrix in matrices)])
    all_scores = np.empty(int(offsets[-1]), dtype=np.float32)
    for matrix, start, end in zip(matrices, offsets[:-1], offsets[1:], strict=True):
        np.dot(matrix.vectors, query_vector.astype(np.float32, copy=False), out=all_scores[start:end])
    rows, scores = _top_of_scores(all_scores, top_k)
    if scores[-1] <= 0:
        positive = scores > 0
        rows, scores = rows[positive], scores[positive]
    owners = np.searchsorted(offsets, rows, side="right") - 1
    chunk_ids = [int(matrices[owner].ids[row - offsets[owner]]) for owner, row in zip(owners, rows, strict=True)]
    return chunk_ids, scores.tolist()


def _ranked_hits(collection_ids: list[uuid.UUID], ranked: ranking.Ranking,
                 query_vector: np.ndarray) -> list[ChunkHit]:
    """The hits of a ranking, in its order, each with its cosine similarity (read from the chunk's stored vector);
    only chunks of the named collections."""
    if not ranked:
        return []
    db = connections[DEFAULT_DB_ALIAS]
    prepared = [Collection._meta.pk.get_db_prep_value(pk, db) for pk in collection_ids]
    with db.cursor() as cursor:
        cursor.execute(_ranked_rows_sql(db.vendor, len(ranked), len(prepared)),
                       [*prepared, *(chunk_id for chunk_id, _ in ranked)])
        by_id = {row[0]: row for row in cursor.fetchall()}
    hits = []
    for chunk_id, rank_score in ranked:
        row = by_id.get(chunk_id)
        if row is None:  # deleted since it was ranked
            continue
        cosine = float(from_bytes(row[6]) @ query_vector)
        hits.append(ChunkHit(chunk_id, row[1], row[2], round(min(cosine, 1.0), 6), index.as_uuid(row[3]), row[4],
                             round(rank_score, 6), index.as_uuid(row[5])))
    return hits


@functools.lru_cache(maxsize=256)
def _ranked_rows_sql(vendor: str, count: int, collections: int) -> str:
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    chunk, document = quote(Chunk._meta.db_table), quote(Document._meta.db_table)
    return (f"SELECT c.{quote('id')}, c.{quote('index')}, c.{quote('text')}, c.{quote('document_id')}, "
            f"d.{quote('filename')}, d.{quote('collection_id')}, c.{quote('vector')} FROM {chunk} c "
            f"JOIN {document} d ON d.{quote('id')} = c.{quote('document_id')} "
            f"WHERE d.{quote('collection_id')} IN ({', '.join(['%s'] * collections)}) AND c.{quote('id')} IN "
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

    def rank_many(self, owner_ids: Sequence[int], query: str, k: int) -> ranking.Ranking:
        """rank over several collections: the query embedded once, their scores ranked together."""
        query_vector = embed(query)
        if k < 1 or not query_vector.any():
            return []
        chunk_ids, scores = _ranked_many([index.matrix_for(owner_id) for owner_id in owner_ids], query_vector, k)
        return list(zip(chunk_ids, scores, strict=True))


def vector_search(*, owner_id: int, query: str, top_k: int = 5) -> list[ChunkHit]:
    """The chunks of one collection (owner_id: its key) most similar to query, best first: at most top_k, only
    positive scores."""
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
    return _top_of_scores(vectors @ query_vector, top_k)


def _top_of_scores(scores: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
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
            hits.append(ChunkHit(chunk_id, row[1], row[2], score, index.as_uuid(row[3]), row[4], score,
                                 index.as_uuid(row[5])))
    return hits


# Every search runs one of these statements: plain SQL built once per database vendor and number of ids, since
# building an ORM query (or even quoting the names again) costs more than SQLite takes to answer it.
@functools.lru_cache(maxsize=64)
def _rows_sql(vendor: str, count: int, with_stamp: bool) -> str:
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    chunk, document = quote(Chunk._meta.db_table), quote(Document._meta.db_table)
    stamp = (f", (SELECT {quote('value')} FROM {quote(KnowledgeStamp._meta.db_table)} "
             f"WHERE {quote('key')} = %s)" if with_stamp else "")
    return (f"SELECT c.{quote('id')}, c.{quote('index')}, c.{quote('text')}, c.{quote('document_id')}, "
            f"d.{quote('filename')}, d.{quote('collection_id')}{stamp} FROM {chunk} c JOIN {document} d "
            f"ON d.{quote('id')} = c.{quote('document_id')} WHERE c.{quote('id')} IN ({', '.join(['%s'] * count)})")


def _chunk_rows(chunk_ids: list[int]) -> list[tuple]:
    """(id, index, text, document_id, filename, collection_id) of the given chunks, in no particular order."""
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
    return rows[0][6] or 0, rows


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


def context_build(*, owner_id: int | None = None, query: str, max_chars: int, top_k: int = 5,
                  mode: str = DEFAULT_MODE, collections: Sequence[Collection] | None = None) -> KnowledgeContext:
    """The best chunks for query as `[filename] text` entries, best first, joined, cut to max_chars.

    The entry that reaches the budget is cut there; it is left out instead when not even its
    `[filename] ` header and one character of text would fit.
    """
    parts: list[str] = []
    used: list[ChunkHit] = []
    remaining = max_chars
    for hit in chunk_search(owner_id=owner_id, query=query, top_k=top_k, mode=mode, collections=collections):
        header = f"{CONTEXT_SEPARATOR if parts else ''}[{hit.filename}] "
        if remaining <= len(header):
            break
        entry = (header + hit.text)[:remaining]
        if len(entry) < len(header) + len(hit.text):
            # Cut at the budget, and without the whitespace the cut may end on: the reference block reaches the
            # model stripped (agentsite.agent.context.format_reference), and the source must say what it got.
            entry = entry.rstrip()
            if len(entry) <= len(header):
                break
        parts.append(entry)
        # The hit as it went in: a passage cut at the budget is recorded as cut (a message's sources show
        # what the model received).
        used.append(hit if len(entry) == len(header) + len(hit.text) else
                    dataclasses.replace(hit, text=entry[len(header):]))
        remaining -= len(parts[-1])
    return KnowledgeContext("".join(parts), used)

"""Each owner's chunk vectors as one float32 matrix in this process, so a search is one matrix–vector product.

A matrix is labelled with the owner's KnowledgeStamp. Every search compares the label with the stamp in
the database (one indexed read). When they differ, another process wrote: the matrix is brought up to
date by whole documents (chunks never change after ingest), dropping the rows of deleted documents and
reading only the chunks of new ones; with no matrix yet, all the owner's chunks are read. Writes in this
process patch the matrix after they commit (`matrix_add` / `matrix_remove`), without any read, when the
matrix is exactly one write behind.

Consistency of a refresh: writers lock the owner's stamp row before they touch documents or chunks and
hold it until commit; a refresh locks the same row before it reads. So what a refresh reads is exactly
the state of the stamp it read, never a newer write labelled with an older stamp (which a later patch
would then apply twice).
"""

from __future__ import annotations

import functools
import threading
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import numpy as np
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction

from knowledge.embedding import DIMENSIONS
from knowledge.models import Chunk, Document, KnowledgeStamp

_IN_BATCH = 500  # documents per `IN (...)` when reading the chunks of new documents


@dataclass(frozen=True)
class OwnerMatrix:
    """A snapshot: rows of the arrays past `size` may be written by a later append, never those before it."""

    stamp: int
    buffer: np.ndarray  # (capacity, 256) float32, C-contiguous
    chunk_ids: np.ndarray  # (capacity,) int64
    document_codes: np.ndarray  # (capacity,) int64: which document each row belongs to
    documents: dict[uuid.UUID, int] = field(default_factory=dict)  # document id -> code, present ones only
    size: int = 0
    next_code: int = 0

    @property
    def vectors(self) -> np.ndarray:
        return self.buffer[:self.size]

    @property
    def ids(self) -> np.ndarray:
        return self.chunk_ids[:self.size]

    def appended(self, stamp: int, row_documents: Sequence[uuid.UUID], chunk_ids: Sequence[int],
                 vectors: np.ndarray) -> OwnerMatrix:
        """This matrix plus rows of new documents (row_documents[i] owns chunk_ids[i] and vectors[i])."""
        documents, next_code = dict(self.documents), self.next_code
        codes = np.empty(len(chunk_ids), dtype=np.int64)
        for row, document_id in enumerate(row_documents):
            if document_id not in documents:
                documents[document_id], next_code = next_code, next_code + 1
            codes[row] = documents[document_id]
        buffer, ids, all_codes = self.buffer, self.chunk_ids, self.document_codes
        size, end = self.size, self.size + len(chunk_ids)
        if end > len(buffer):
            # Doubling keeps a run of appends linear; the old arrays stay intact for searches holding them.
            capacity = max(end, 2 * len(buffer), 1024)
            buffer, ids, all_codes = (_grown(array, capacity, size) for array in (buffer, ids, all_codes))
        buffer[size:end] = vectors
        ids[size:end] = chunk_ids
        all_codes[size:end] = codes
        return OwnerMatrix(stamp, buffer, ids, all_codes, documents, end, next_code)

    def without(self, stamp: int, document_ids: Collection[uuid.UUID] | None) -> OwnerMatrix:
        """This matrix less the rows of some documents (None: of all of them), in new arrays."""
        if document_ids is None:
            return empty_matrix(stamp)
        gone = [self.documents[document_id] for document_id in document_ids if document_id in self.documents]
        documents = {key: code for key, code in self.documents.items() if key not in document_ids}
        keep = ~np.isin(self.document_codes[:self.size], gone)
        return OwnerMatrix(stamp, self.buffer[:self.size][keep], self.chunk_ids[:self.size][keep],
                           self.document_codes[:self.size][keep], documents, int(keep.sum()), self.next_code)


def empty_matrix(stamp: int) -> OwnerMatrix:
    return OwnerMatrix(stamp, np.empty((0, DIMENSIONS), dtype=np.float32), np.empty(0, dtype=np.int64),
                       np.empty(0, dtype=np.int64))


def _grown(array: np.ndarray, capacity: int, size: int) -> np.ndarray:
    grown = np.empty((capacity, *array.shape[1:]), dtype=array.dtype)
    grown[:size] = array[:size]
    return grown


_matrices: dict[int, OwnerMatrix] = {}
_lock = threading.Lock()


def stamp_current(owner_id: int) -> int:
    """The owner's stamp in the database; 0 before their first write."""
    db = connections[DEFAULT_DB_ALIAS]
    with db.cursor() as cursor:
        cursor.execute(_stamp_sql(db.vendor), [owner_id])
        row = cursor.fetchone()
    return row[0] if row else 0


@functools.lru_cache(maxsize=8)
def _stamp_sql(vendor: str) -> str:
    # Plain SQL built once: the ORM query (or quoting the names per call) costs more than the read itself.
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    return (f"SELECT {quote('value')} FROM {quote(KnowledgeStamp._meta.db_table)} "
            f"WHERE {quote('owner_id')} = %s")


def stamp_lock(owner_id: int) -> KnowledgeStamp:
    """Lock the owner's stamp row for the current transaction, creating it first when missing."""
    KnowledgeStamp.objects.get_or_create(owner_id=owner_id)
    return KnowledgeStamp.objects.select_for_update().get(owner_id=owner_id)


def matrix_for(owner_id: int) -> OwnerMatrix:
    """The owner's current matrix, brought up to date first when another process wrote."""
    cached = _matrices.get(owner_id)
    if cached is not None and cached.stamp == stamp_current(owner_id):
        return cached
    fresh = _matrix_refresh(owner_id, cached)
    with _lock:
        _matrices[owner_id] = fresh
    return fresh


def _matrix_refresh(owner_id: int, cached: OwnerMatrix | None) -> OwnerMatrix:
    with transaction.atomic():
        stamp = stamp_lock(owner_id).value
        present = set(Document.objects.filter(owner_id=owner_id).values_list("id", flat=True))
        known = cached.documents.keys() if cached is not None else set()
        new = None if cached is None else present - known
        rows = _chunk_rows(owner_id, new)
    base = empty_matrix(stamp) if cached is None else cached.without(stamp, known - present)
    row_documents = _row_documents([row[1] for row in rows])
    vectors = np.frombuffer(b"".join(row[2] for row in rows), dtype="<f4").reshape(len(rows), DIMENSIONS)
    return base.appended(stamp, row_documents, [row[0] for row in rows], vectors)


def _chunk_rows(owner_id: int, document_ids: set[uuid.UUID] | None) -> list[tuple]:
    """(id, document_id, vector) of the chunks of some documents, or of all the owner's (None)."""
    # Plain SQL: a full read of 100,000 chunks takes half the time of the ORM's (bench/kb.py).
    quote = connection.ops.quote_name
    select = (f"SELECT c.{quote('id')}, c.{quote('document_id')}, c.{quote('vector')} "
              f"FROM {quote(Chunk._meta.db_table)} c ")
    with connection.cursor() as cursor:
        if document_ids is None:
            cursor.execute(select + f"JOIN {quote(Document._meta.db_table)} d ON d.{quote('id')} = "
                           f"c.{quote('document_id')} WHERE d.{quote('owner_id')} = %s", [owner_id])
            return cursor.fetchall()
        rows: list[tuple] = []
        keys = [Document._meta.pk.get_db_prep_value(key, connection) for key in document_ids]
        for start in range(0, len(keys), _IN_BATCH):
            batch = keys[start:start + _IN_BATCH]
            cursor.execute(select + f"WHERE c.{quote('document_id')} IN ({', '.join(['%s'] * len(batch))})", batch)
            rows.extend(cursor.fetchall())
        return rows


def _row_documents(raw_keys: list) -> list[uuid.UUID]:
    # SQLite hands UUIDs back as hex text; convert each distinct one once, not once per chunk.
    converted: dict = {}
    return [converted.get(key) or converted.setdefault(key, as_uuid(key)) for key in raw_keys]


def as_uuid(value: uuid.UUID | str) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else _uuid_from_text(value)


# Each search converts its hits' document ids (SQLite's hex text): the same few documents, again and again.
_uuid_from_text = functools.lru_cache(maxsize=4096)(uuid.UUID)


def matrix_add(*, owner_id: int, before: int, after: int, document_id: uuid.UUID, chunk_ids: list[int],
               vectors: np.ndarray) -> None:
    """Append a committed document's chunks when the cached matrix is at stamp `before` (one write behind)."""
    with _lock:
        current = _matrices.get(owner_id)
        if current is None or current.stamp != before:
            return  # not cached, already refreshed, or another process wrote in between: a search refreshes
        _matrices[owner_id] = current.appended(after, [document_id] * len(chunk_ids), chunk_ids, vectors)


def matrix_remove(*, owner_id: int, before: int, after: int, document_id: uuid.UUID | None) -> None:
    """Drop a committed deletion's rows (None: all of them) when the cached matrix is at stamp `before`."""
    with _lock:
        current = _matrices.get(owner_id)
        if current is None or current.stamp != before:
            return
        _matrices[owner_id] = current.without(after, None if document_id is None else {document_id})


def matrices_forget(owner_id: int | None = None) -> None:
    """Drop one owner's cached matrix, or all of them (tests; freeing memory)."""
    with _lock:
        if owner_id is None:
            _matrices.clear()
        else:
            _matrices.pop(owner_id, None)


def cached_matrix(owner_id: int) -> OwnerMatrix | None:
    """The cached matrix as is, without checking the database (tests and diagnostics)."""
    return _matrices.get(owner_id)

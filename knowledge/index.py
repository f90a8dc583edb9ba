"""Each collection's chunk vectors as one float32 matrix in this process, so a search is one matrix–vector product.

Here (and in lexical.py, ranking.py, dense_index.py) an "owner" is a collection: `owner_id` is its `key`.

A matrix is labelled with the owner's KnowledgeStamp; a search compares the label with the database's stamp and,
when another process wrote, brings the matrix up to date by whole documents. Writes in this process patch it
after they commit. Writers and refreshes lock the owner's stamp row, so a refresh reads exactly its stamp's state.
The dense model's vectors are a second signal kept alike (knowledge/dense_index.py).

The matrices are a least-recently-used cache under AGENTSITE_KB_INDEX_CACHE_MB: what one user's documents cost is
held only while they are among the recent searchers, and never more than the budget in all.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction

from knowledge import models as kb_models
from knowledge.embedding import DIMENSIONS
from knowledge.models import Chunk, Document, KnowledgeStamp

logger = logging.getLogger(__name__)

_IN_BATCH = 500  # documents per `IN (...)` when reading the chunks of new documents
_FETCH_BATCH = 2000  # chunk rows held as Python objects at once while a matrix is built (~2.5 MB)
_DOCUMENT_ENTRY_BYTES = 200  # what one entry of OwnerMatrix.documents costs (a UUID, an int, the dict slot)


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

    @property
    def nbytes(self) -> int:
        """The memory this matrix holds, reserved rows included: what the cache's budget counts."""
        arrays = self.buffer.nbytes + self.chunk_ids.nbytes + self.document_codes.nbytes
        return arrays + _DOCUMENT_ENTRY_BYTES * len(self.documents)

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
            return empty_matrix(stamp, dimensions=self.buffer.shape[1])
        gone = [self.documents[document_id] for document_id in document_ids if document_id in self.documents]
        documents = {key: code for key, code in self.documents.items() if key not in document_ids}
        keep = ~np.isin(self.document_codes[:self.size], gone)
        return OwnerMatrix(stamp, self.buffer[:self.size][keep], self.chunk_ids[:self.size][keep],
                           self.document_codes[:self.size][keep], documents, int(keep.sum()), self.next_code)


def empty_matrix(stamp: int, capacity: int = 0, dimensions: int = DIMENSIONS) -> OwnerMatrix:
    """A matrix of no rows, with room for `capacity` before its first append has to grow it."""
    return OwnerMatrix(stamp, np.empty((capacity, dimensions), dtype=np.float32), np.empty(capacity, dtype=np.int64),
                       np.empty(capacity, dtype=np.int64))


def _grown(array: np.ndarray, capacity: int, size: int) -> np.ndarray:
    grown = np.empty((capacity, *array.shape[1:]), dtype=array.dtype)
    grown[:size] = array[:size]
    return grown


CacheKey = int | tuple[str, int]


class _MatrixCache:
    """Owner id -> matrix, least recently used first, holding at most `budget()` bytes in all.

    Every method takes the lock; `get` marks the owner as used. `put` stores a matrix (replacing the
    owner's) and then evicts from the least recently used end until the total fits; a matrix over the
    whole budget is not stored at all (and the owner's older one is dropped).
    """

    def __init__(self) -> None:
        # Keys: an owner id (the hash vectors) or (signal, owner id) for another signal's matrix (the dense
        # model's, knowledge/dense_index.py): one budget for all.
        self._matrices: OrderedDict[CacheKey, OwnerMatrix] = OrderedDict()
        self._bytes = 0
        self.lock = threading.Lock()

    @staticmethod
    def budget() -> int:
        return settings.AGENTSITE_KB_INDEX_CACHE_BYTES

    def get(self, owner_id: CacheKey) -> OwnerMatrix | None:
        with self.lock:
            return self.get_locked(owner_id)

    def get_locked(self, owner_id: CacheKey) -> OwnerMatrix | None:
        matrix = self._matrices.get(owner_id)
        if matrix is not None:
            self._matrices.move_to_end(owner_id)
        return matrix

    def put(self, owner_id: CacheKey, matrix: OwnerMatrix) -> None:
        with self.lock:
            self.put_locked(owner_id, matrix)

    def put_locked(self, owner_id: CacheKey, matrix: OwnerMatrix) -> None:
        self.pop_locked(owner_id)
        budget = self.budget()
        if matrix.nbytes > budget:
            logger.warning("The search matrix of user %s (%d bytes) is larger than AGENTSITE_KB_INDEX_CACHE_MB "
                           "(%d bytes): it is rebuilt for every search", owner_id, matrix.nbytes, budget)
            return
        self._matrices[owner_id] = matrix
        self._bytes += matrix.nbytes
        while self._bytes > budget:
            _, evicted = self._matrices.popitem(last=False)
            self._bytes -= evicted.nbytes

    def pop_locked(self, owner_id: CacheKey) -> None:
        gone = self._matrices.pop(owner_id, None)
        if gone is not None:
            self._bytes -= gone.nbytes

    def clear(self) -> None:
        with self.lock:
            self._matrices.clear()
            self._bytes = 0

    def keys_locked(self) -> list[CacheKey]:
        return list(self._matrices)

    def peek(self, owner_id: CacheKey) -> OwnerMatrix | None:
        return self._matrices.get(owner_id)

    def owners(self) -> list[int]:
        """Owners whose hash-vector matrices are cached, least recently used first."""
        with self.lock:
            return [key for key in self._matrices if isinstance(key, int)]

    @property
    def nbytes(self) -> int:
        return self._bytes


_cache = _MatrixCache()


def stamp_current(owner_id: int) -> int:
    """The collection's stamp in the database (owner_id: its key); 0 before its first write."""
    db = connections[DEFAULT_DB_ALIAS]
    with db.cursor() as cursor:
        cursor.execute(_stamp_sql(db.vendor), [owner_id])
        row = cursor.fetchone()
    return row[0] if row else 0


def stamps_current(keys: Sequence[int]) -> dict[int, int]:
    """The stamps of several collections in one statement: key -> stamp (0 before its first write)."""
    if not keys:
        return {}
    db = connections[DEFAULT_DB_ALIAS]
    with db.cursor() as cursor:
        cursor.execute(_stamps_sql(db.vendor, len(keys)), list(keys))
        found = dict(cursor.fetchall())
    return {key: found.get(key, 0) for key in keys}


@functools.lru_cache(maxsize=64)
def _stamps_sql(vendor: str, count: int) -> str:
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    return (f"SELECT {quote('key')}, {quote('value')} FROM {quote(KnowledgeStamp._meta.db_table)} "
            f"WHERE {quote('key')} IN ({', '.join(['%s'] * count)})")


@functools.lru_cache(maxsize=8)
def _stamp_sql(vendor: str) -> str:
    # Plain SQL built once: the ORM query (or quoting the names per call) costs more than the read itself.
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    return (f"SELECT {quote('value')} FROM {quote(KnowledgeStamp._meta.db_table)} "
            f"WHERE {quote('key')} = %s")


def stamp_lock(owner_id: int) -> KnowledgeStamp:
    """Lock the owner's stamp row for the current transaction, creating it first when missing."""
    KnowledgeStamp.objects.get_or_create(key=owner_id)
    return KnowledgeStamp.objects.select_for_update().get(key=owner_id)


@dataclass(frozen=True)
class Signal:
    """Which stored vectors a matrix holds: the Chunk column, its width, and the cache key's prefix.

    The hash vectors (HASH) are in every chunk. The dense model's (knowledge/dense_index.py) may be missing
    from chunks stored before the model was installed: only documents whose chunks all have one are in that
    matrix, so a document the backfill completes is read as a new document by the next refresh.
    """

    column: str
    dimensions: int
    prefix: str = ""  # "" for the hash vectors: their key is the bare owner id
    complete_only: bool = False  # only documents whose chunks all have a value in `column`

    def key(self, owner_id: int) -> CacheKey:
        return (self.prefix, owner_id) if self.prefix else owner_id


HASH = Signal("vector", DIMENSIONS)


_known = threading.local()


@contextlib.contextmanager
def stamps_known(stamps: dict[int, int]) -> Iterator[None]:
    """Within it, matrix_for on this thread takes these stamps (key -> stamp, read by stamps_current for a search
    over several collections in one statement) instead of reading each one again."""
    previous = getattr(_known, "stamps", None)
    _known.stamps = stamps
    try:
        yield
    finally:
        _known.stamps = previous


def matrix_for(owner_id: int, signal: Signal = HASH, *, stamp: int | None = None) -> OwnerMatrix:
    """The owner's current matrix, brought up to date first when another process wrote.

    stamp: the owner's stamp as the caller has just read it (stamps_current, for several collections in one
    statement; or stamps_known); None: read here."""
    key = signal.key(owner_id)
    cached = _cache.get(key)
    if stamp is None and (known := getattr(_known, "stamps", None)) is not None:
        stamp = known.get(owner_id)
    if cached is not None and cached.stamp == (stamp_current(owner_id) if stamp is None else stamp):
        return cached
    fresh = _matrix_refresh(owner_id, cached, signal)
    _cache.put(key, fresh)
    return fresh


def _matrix_refresh(owner_id: int, cached: OwnerMatrix | None, signal: Signal = HASH) -> OwnerMatrix:
    with transaction.atomic():
        stamp = stamp_lock(owner_id).value
        documents = Document.objects.filter(collection__key=owner_id)
        if signal.complete_only:
            documents = documents.exclude(**{f"chunks__{signal.column}__isnull": True})
        present = set(documents.values_list("id", flat=True))
        known = cached.documents.keys() if cached is not None else set()
        if cached is None and not signal.complete_only:
            # Sized beforehand: growing by doubling would hold up to three times the matrix at its peak.
            matrix, new = empty_matrix(stamp, Chunk.objects.filter(document__collection__key=owner_id).count()), None
        elif cached is None:
            capacity = Chunk.objects.filter(document_id__in=present).count() if present else 0
            matrix, new = empty_matrix(stamp, capacity, signal.dimensions), present
        else:
            matrix, new = cached.without(stamp, known - present), present - known
        for rows in _chunk_rows(owner_id, new, signal.column):
            vectors = np.frombuffer(b"".join(row[2] for row in rows), dtype="<f4").reshape(len(rows),
                                                                                        signal.dimensions)
            matrix = matrix.appended(stamp, _row_documents([row[1] for row in rows]), [row[0] for row in rows],
                                     vectors)
    return matrix


def _chunk_rows(owner_id: int, document_ids: set[uuid.UUID] | None,
                column: str = "vector") -> Iterator[list[tuple]]:
    """(id, document_id, vector) of the chunks of some documents, or of all the owner's (None), in batches."""
    # Plain SQL: a full read of 100,000 chunks takes half the time of the ORM's (bench/kb.py).
    quote = connection.ops.quote_name
    select = (f"SELECT c.{quote('id')}, c.{quote('document_id')}, c.{quote(column)} "
              f"FROM {quote(Chunk._meta.db_table)} c ")
    with connection.cursor() as cursor:
        if document_ids is None:
            cursor.execute(select + f"JOIN {quote(Document._meta.db_table)} d ON d.{quote('id')} = "
                           f"c.{quote('document_id')} JOIN {quote(kb_models.Collection._meta.db_table)} k ON "
                           f"k.{quote('id')} = d.{quote('collection_id')} WHERE k.{quote('key')} = %s", [owner_id])
            yield from _batches(cursor)
            return
        keys = [Document._meta.pk.get_db_prep_value(key, connection) for key in document_ids]
        for start in range(0, len(keys), _IN_BATCH):
            batch = keys[start:start + _IN_BATCH]
            cursor.execute(select + f"WHERE c.{quote('document_id')} IN ({', '.join(['%s'] * len(batch))})", batch)
            yield from _batches(cursor)


def _batches(cursor) -> Iterator[list[tuple]]:
    # Rows of a few thousand at a time: a whole owner's rows as Python objects cost more than their matrix, and
    # freed in one go they leave the process's heap fragmented at that size (daphne's RSS stayed up).
    while rows := cursor.fetchmany(_FETCH_BATCH):
        yield rows


def _row_documents(raw_keys: list) -> list[uuid.UUID]:
    # SQLite hands UUIDs back as hex text; convert each distinct one once, not once per chunk.
    converted: dict = {}
    return [converted.get(key) or converted.setdefault(key, as_uuid(key)) for key in raw_keys]


def as_uuid(value: uuid.UUID | str) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else _uuid_from_text(value)


# Each search converts its hits' document ids (SQLite's hex text): the same few documents, again and again.
_uuid_from_text = functools.lru_cache(maxsize=4096)(uuid.UUID)


def matrix_add(*, owner_id: int, before: int, after: int, document_id: uuid.UUID, chunk_ids: list[int],
               vectors: np.ndarray, signal: Signal = HASH) -> None:
    """Append a committed document's chunks when the cached matrix is at stamp `before` (one write behind)."""
    key = signal.key(owner_id)
    with _cache.lock:
        current = _cache.peek(key)
        if current is None or current.stamp != before:
            return  # not cached, already refreshed, or another process wrote in between: a search refreshes
        _cache.put_locked(key, current.appended(after, [document_id] * len(chunk_ids), chunk_ids, vectors))


def matrix_remove(*, owner_id: int, before: int, after: int, document_id: uuid.UUID | None) -> None:
    """Drop a committed deletion's rows (None: all of them) from every signal's matrix at stamp `before`."""
    with _cache.lock:
        for key in _keys_of(owner_id):
            current = _cache.peek(key)
            if current is None or current.stamp != before:
                continue
            _cache.put_locked(key, current.without(after, None if document_id is None else {document_id}))


def matrix_restamp(*, owner_id: int, before: int, after: int, signal: Signal) -> None:
    """After a write that changed nothing but other signals' vectors: relabel this signal's matrix."""
    key = signal.key(owner_id)
    with _cache.lock:
        current = _cache.peek(key)
        if current is not None and current.stamp == before:
            _cache.put_locked(key, dataclasses.replace(current, stamp=after))


def _keys_of(owner_id: int) -> list[CacheKey]:
    return [key for key in _cache.keys_locked() if key == owner_id or (isinstance(key, tuple) and key[1] == owner_id)]


def matrices_forget(owner_id: int | None = None) -> None:
    """Drop one owner's cached matrices (every signal's), or all of them (tests; freeing memory)."""
    if owner_id is None:
        _cache.clear()
        return
    with _cache.lock:
        for key in _keys_of(owner_id):
            _cache.pop_locked(key)


def cached_matrix(owner_id: int) -> OwnerMatrix | None:
    """The cached matrix as is, without checking the database (a search's first look; marks it used)."""
    return _cache.get(owner_id)


def cache_nbytes() -> int:
    """The bytes the cached matrices hold in all (at most AGENTSITE_KB_INDEX_CACHE_MB)."""
    return _cache.nbytes


def cached_owners() -> list[int]:
    """The owners whose matrices are cached, least recently used first."""
    return _cache.owners()

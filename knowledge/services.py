"""Writes of the knowledge base: adding, deleting and clearing documents.

Each write changes the owner's KnowledgeStamp in the same transaction (processes see their matrices are
stale), and patches this process's matrix once the transaction has committed.
"""

from __future__ import annotations

import logging
import secrets
import uuid
from collections.abc import Sequence
from functools import partial

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F

from agentsite.core import taskqueue
from agentsite.core.diskspace import free_space_check
from agentsite.core.errors import AppError
from knowledge import dense, index, lexical
from knowledge.chunking import chunk_text
from knowledge.embedding import embed_many, to_bytes, tokenize
from knowledge.extraction import TEXT, normalize_text, text_from_content, text_from_upload
from knowledge.models import Chunk, Document
from knowledge.selectors import kb_usage_for

logger = logging.getLogger(__name__)

MAX_FILENAME = 255
VECTOR_BYTES = 1024  # a chunk's 256 float32 values, as stored
DENSE_TASK = "knowledge.services.dense_embed_pending"  # run by the task queue after each add


def _stamp_change(owner_id: int) -> tuple[int, int]:
    """Lock the owner's stamp and give it a new value; returns (before, after)."""
    stamp = index.stamp_lock(owner_id)
    before = stamp.value
    stamp.value = secrets.randbits(63) or 1  # never 0, the value of "no writes yet"
    stamp.save(update_fields=["value", "changed_at"])
    return before, stamp.value


def document_ingest(*, owner_id: int, filename: str, content: str, content_type: str = TEXT) -> Document:
    """Add a document sent as text (plain, Markdown, or HTML turned into text), with all its chunks or nothing.

    Raises AppError 415 `unsupported_media_type`, 400 `empty_document`, 400 `invalid` (filename), 413
    `quota_exceeded` (details: used_bytes, quota_bytes, size), 507 `insufficient_storage` (a nearly full disk).
    """
    extracted = text_from_content(filename=filename, content_type=content_type, content=content)
    return _document_store(owner_id=owner_id, filename=filename, text=extracted.text,
                           content_type=extracted.content_type, size=len(content.encode("utf-8")))


def document_ingest_upload(*, owner_id: int, filename: str, content_type: str, data: bytes) -> Document:
    """Add an uploaded file (text, Markdown, HTML or PDF) as a document, with all its chunks or nothing.

    Raises AppError 415 `unsupported_media_type`, 400 `unreadable_document`, `empty_document` or `invalid`, 413
    `quota_exceeded`, 507 `insufficient_storage`.
    """
    extracted = text_from_upload(filename=filename, content_type=content_type, data=data)
    return _document_store(owner_id=owner_id, filename=filename, text=extracted.text,
                           content_type=extracted.content_type, size=len(data))


@transaction.atomic
def _document_store(*, owner_id: int, filename: str, text: str, content_type: str, size: int) -> Document:
    free_space_check()
    filename = _clean_filename(filename)
    text = normalize_text(text)
    if not text.strip():
        raise AppError("empty_document", "The document has no text to add.", 400)
    texts = chunk_text(text)
    tokens = [tokenize(chunk) for chunk in texts]  # once, for both the vectors and the lexical index
    camel = lexical.has_camel_case(text)  # once per document: most prose has no identifier to split
    words = [lexical.terms(chunk, chunk_tokens, camel=camel) for chunk, chunk_tokens in zip(texts, tokens, strict=True)]
    terms_texts = list(map(lexical.joined, words))  # once, for the quota and the index
    stored = stored_size(text=text, chunks=texts, words=terms_texts)
    # With the dense model installed, the quota keeps room for the vectors the task queue adds later.
    with_dense = dense.available()
    reserved = stored + (dense.VECTOR_BYTES * len(texts) if with_dense else 0)
    _quota_check(owner_id=owner_id, size=reserved)  # before the embedding: no work for a document that cannot fit
    vectors = embed_many(texts, tokens)
    before, after = _stamp_change(owner_id)  # first: a concurrent rebuild must not see half of this write
    # Again under the stamp's lock, held until commit: of two concurrent adds, the second counts the first.
    _quota_check(owner_id=owner_id, size=reserved)
    document = Document.objects.create(owner_id=owner_id, filename=filename, content_type=content_type,
                                       content=text, size=size, stored_bytes=stored)
    chunk_ids = _chunks_insert(document=document, texts=texts, vectors=vectors)
    lexical.index_add(owner_id=owner_id, chunk_ids=chunk_ids, texts=terms_texts)  # in this transaction
    document.chunk_count = len(chunk_ids)
    transaction.on_commit(partial(index.matrix_add, owner_id=owner_id, before=before, after=after,
                                  document_id=document.pk, chunk_ids=chunk_ids, vectors=vectors))
    if with_dense:
        # The dense model embeds 3 to 75 chunks a second: never inside the request. The document is searchable
        # now by the hash vectors and the lexical index; the dense ranker takes it once all its chunks have
        # their vectors (knowledge/dense_index.py). On the ORM broker the task commits with the document.
        taskqueue.enqueue_with_commit(DENSE_TASK, [(owner_id,)])
    logger.info("Knowledge document %s added: %d chunks", document.pk, len(chunk_ids))
    return document


def stored_size(*, text: str, chunks: list[str], words: Sequence[Sequence[str] | str] | None = None,
                dense_vectors: bool = False) -> int:
    """What a document holds in the database, as the quota counts it: text, chunk texts, vectors, lexical entries.

    words: each chunk's lexical terms (knowledge.lexical.terms, or lexical.joined of them), when the caller has
    them already.
    dense_vectors: whether each chunk also stores the dense model's vector (dense.VECTOR_BYTES more).
    """
    if words is None:
        words = [lexical.terms(chunk) for chunk in chunks]
    per_chunk = VECTOR_BYTES + (dense.VECTOR_BYTES if dense_vectors else 0)
    # Summed over the document at once: the lengths are additive (UTF-8 bytes of the texts, of the terms).
    chunk_bytes = len("".join(chunks).encode("utf-8"))
    lexical_bytes = sum(map(lexical.stored_bytes, words))
    return len(text.encode("utf-8")) + chunk_bytes + per_chunk * len(chunks) + lexical_bytes


def _quota_check(*, owner_id: int, size: int) -> None:
    quota = settings.AGENTSITE_KB_QUOTA_BYTES
    if not quota:
        return
    used = kb_usage_for(owner_id=owner_id)
    if used + size > quota:
        raise AppError("quota_exceeded", f"This document ({_mb(size)} MB stored) does not fit in your knowledge-base "
                       f"quota: {_mb(used)} MB of {_mb(quota)} MB are used. Delete documents to make room.", 413,
                       {"used_bytes": used, "quota_bytes": quota, "size": size})


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):.1f}".removesuffix(".0")


def _chunks_insert(*, document: Document, texts: list[str], vectors: np.ndarray,
                   dense_vectors: np.ndarray | None = None) -> list[int]:
    """Insert a document's chunks with one prepared statement; returns their ids in chunk order."""
    # bulk_create spent most of the ingest time compiling SQL row by row (bench/kb.py); executemany
    # reuses one statement, so ingest stays above 5 MB/s.
    fields = [Chunk._meta.get_field(name) for name in ("document", "index", "text", "vector", "dense")]
    columns = ", ".join(connection.ops.quote_name(field.column) for field in fields)
    statement = (f"INSERT INTO {connection.ops.quote_name(Chunk._meta.db_table)} ({columns}) "
                 f"VALUES (%s, %s, %s, %s, %s)")
    document_key = fields[0].get_db_prep_value(document.pk, connection)
    denses = [None] * len(texts) if dense_vectors is None else [dense.to_bytes(row) for row in dense_vectors]
    rows = [(document_key, number, text, to_bytes(vector), dense_bytes)
            for number, (text, vector, dense_bytes) in enumerate(zip(texts, vectors, denses, strict=True))]
    with connection.cursor() as cursor:
        cursor.executemany(statement, rows)
    return list(Chunk.objects.filter(document=document).order_by("index").values_list("id", flat=True))


@transaction.atomic
def document_delete(*, owner_id: int, document_id: uuid.UUID) -> None:
    """Delete one of the owner's documents and its chunks. Raises AppError 404 `not_found`."""
    if not Document.objects.filter(owner_id=owner_id, pk=document_id).exists():
        raise AppError("not_found", "No such document.", 404)
    before, after = _stamp_change(owner_id)
    Document.objects.filter(owner_id=owner_id, pk=document_id).only("id").delete()  # not the content
    transaction.on_commit(partial(index.matrix_remove, owner_id=owner_id, before=before, after=after,
                                  document_id=document_id))


@transaction.atomic
def documents_clear(*, owner_id: int) -> int:
    """Delete all of the owner's documents; returns how many there were."""
    before, after = _stamp_change(owner_id)
    _, deleted = Document.objects.filter(owner_id=owner_id).only("id").delete()  # not the contents
    transaction.on_commit(partial(index.matrix_remove, owner_id=owner_id, before=before, after=after,
                                  document_id=None))
    return deleted.get(Document._meta.label, 0)


def _clean_filename(filename: str) -> str:
    # Only the base name: a client path ("C:\\docs\\a.txt") says nothing the reader needs.
    name = filename.replace("\\", "/").rsplit("/", 1)[-1].strip()
    name = "".join(char for char in name if char.isprintable())
    if not name or len(name) > MAX_FILENAME:
        raise AppError("invalid", f"filename must be 1 to {MAX_FILENAME} characters.", 400,
                       {"filename": [f"Give a name of 1 to {MAX_FILENAME} characters."]})
    return name


def dense_embed_pending(owner_id: int) -> int:
    """The task queued by each add when the dense model is installed: embed the owner's chunks that lack a vector.

    Every chunk of the owner still without one is embedded, not only the new document's: a task lost to a
    restart (Redis broker: queued after commit) is made good by the owner's next add, and by
    `manage.py kb_dense_backfill`. Two tasks running at once fill each chunk once (_dense_fill updates only a
    chunk still without a vector). Returns the chunks filled; 0 when the model is not (or no longer) available.
    """
    if not dense.available():
        return 0
    return dense_backfill(owner_id=owner_id)[1]


def dense_backfill(*, owner_id: int | None = None, on_document=None) -> tuple[int, int]:
    """Give the chunks stored without a dense vector (before the model was installed) theirs, document by document.

    Each document is one transaction that changes its owner's stamp, so every process's dense matrix reads it
    as a new document at its next search. Its stored_bytes grows by 1,536 bytes per chunk; a document already
    stored is never refused for the quota. Returns (documents, chunks) filled. Raises DenseUnavailable when
    the model is not installed.
    """
    if not dense.available():
        raise dense.DenseUnavailable(f"The dense embedding model is not installed ({dense.INSTALL_HINT}).")
    pending = Document.objects.filter(chunks__dense__isnull=True)
    if owner_id is not None:
        pending = pending.filter(owner_id=owner_id)
    documents = chunks = 0
    for document_id, document_owner in pending.values_list("id", "owner_id").distinct().order_by("id"):
        rows = list(Chunk.objects.filter(document_id=document_id, dense__isnull=True).values_list("id", "text"))
        if not rows:
            continue  # filled meanwhile
        vectors = dense.embedder().embed([text for _, text in rows])  # before the lock, like an ingest
        filled = _dense_fill(owner_id=document_owner, document_id=document_id, rows=rows, vectors=vectors)
        documents, chunks = documents + (filled > 0), chunks + filled
        if on_document is not None:
            on_document(document_id, filled)
    return documents, chunks


@transaction.atomic
def _dense_fill(*, owner_id: int, document_id: uuid.UUID, rows: list[tuple[int, str]], vectors: np.ndarray) -> int:
    before, after = _stamp_change(owner_id)
    filled = 0
    for (chunk_id, _), vector in zip(rows, vectors, strict=True):
        filled += Chunk.objects.filter(pk=chunk_id, dense__isnull=True).update(dense=dense.to_bytes(vector))
    Document.objects.filter(pk=document_id).update(stored_bytes=F("stored_bytes") + filled * dense.VECTOR_BYTES)
    # Nothing of the hash vectors changed: relabel this process's matrix instead of letting a search re-read.
    transaction.on_commit(partial(index.matrix_restamp, owner_id=owner_id, before=before, after=after,
                                  signal=index.HASH))
    return filled

"""Writes of the knowledge base: collections (made, changed, deleted, handed over) and their documents (added,
deleted, cleared).

Each write of chunks changes the collection's KnowledgeStamp in the same transaction (processes see their
matrices are stale), and patches this process's matrix once the transaction has committed. Who may do what is
checked by the caller (organisation.policy.require); these functions act.
"""

from __future__ import annotations

import logging
import secrets
import uuid
from collections.abc import Sequence
from functools import partial

import numpy as np
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Max

from agentsite.core import taskqueue
from agentsite.core.diskspace import free_space_check
from agentsite.core.errors import AppError
from knowledge import dense, index, lexical
from knowledge.chunking import chunk_text
from knowledge.embedding import embed_many, to_bytes, tokenize
from knowledge.extraction import TEXT, normalize_text, text_from_content, text_from_upload
from knowledge.models import KEY_BASE, NAME_MAX, Chunk, Collection, Document
from knowledge.selectors import kb_usage_for, personal_collection_of

logger = logging.getLogger(__name__)

MAX_FILENAME = 255
VECTOR_BYTES = 1024  # a chunk's 256 float32 values, as stored
DENSE_TASK = "knowledge.services.dense_embed_pending"  # run by the task queue after each add


PERSONAL_NAME = "Personal"


# --- collections ------------------------------------------------------------------------------------

def _clean_name(name: str) -> str:
    name = (name or "").strip()
    if not name or len(name) > NAME_MAX:
        raise AppError("invalid", f"name must be 1 to {NAME_MAX} characters.", 400,
                       {"name": [f"Give a name of 1 to {NAME_MAX} characters."]})
    return name


def _name_taken(owner_id: int, name: str, *, other_than: uuid.UUID | None = None) -> bool:
    return Collection.objects.filter(owner_id=owner_id, name=name).exclude(pk=other_than).exists()


def _next_key() -> int:
    """A key for a new non-personal collection: above every key in use (a concurrent one: the unique
    constraint, and the caller tries again)."""
    highest = Collection.objects.filter(key__gte=KEY_BASE).aggregate(top=Max("key"))["top"]
    return KEY_BASE if highest is None else highest + 1


def _saved_with_key(collection: Collection, key: int | None = None) -> Collection:
    """Insert a new collection with `key` (None: the next free one), trying again when a concurrent insert took
    the key; AppError 409 `conflict` when its name is taken."""
    for _ in range(5):
        collection.key = key if key is not None else _next_key()
        try:
            with transaction.atomic():
                collection.save(force_insert=True)
            return collection
        except IntegrityError:
            if _name_taken(collection.owner_id, collection.name):
                raise AppError("conflict", f"You have a knowledge collection named {collection.name!r} already.",
                               409, {"name": ["Taken: choose another name."]}) from None
            if collection.personal and personal_collection_of(collection.owner_id) is not None:
                raise
            key = None  # the key was taken (a concurrent create, or the user id by a transferred collection)
    raise AppError("conflict", "Could not make the collection now; try again.", 409)


def collection_personal(owner_id: int) -> Collection:
    """The user's personal collection, made on first use: named "Personal" (or "Personal 2", ... when the user
    has a collection of that name), keyed by the user id when that key is free."""
    found = personal_collection_of(owner_id)
    if found is not None:
        return found
    name, number = PERSONAL_NAME, 1
    while _name_taken(owner_id, name):
        number += 1
        name = f"{PERSONAL_NAME} {number}"
    key = None if Collection.objects.filter(key=owner_id).exists() else owner_id
    try:
        return _saved_with_key(Collection(owner_id=owner_id, name=name, personal=True), key)
    except (IntegrityError, AppError):
        found = personal_collection_of(owner_id)  # made by a concurrent request meanwhile
        if found is None:
            raise
        return found


def collection_create(*, owner_id: int, name: str, description: str = "") -> Collection:
    """A new (non-personal, private) collection. AppError 400 `invalid` (name), 409 `conflict` (name taken)."""
    name = _clean_name(name)
    if _name_taken(owner_id, name):
        raise AppError("conflict", f"You have a knowledge collection named {name!r} already.", 409,
                       {"name": ["Taken: choose another name."]})
    return _saved_with_key(Collection(owner_id=owner_id, name=name, description=description or ""))


def collection_update(collection: Collection, *, name: str | None = None,
                      description: str | None = None) -> Collection:
    """Rename or describe a collection. AppError 400 `invalid`, 409 `conflict` (the owner has that name)."""
    fields = []
    if name is not None:
        name = _clean_name(name)
        if _name_taken(collection.owner_id, name, other_than=collection.pk):
            raise AppError("conflict", f"The owner has a knowledge collection named {name!r} already.", 409,
                           {"name": ["Taken: choose another name."]})
        collection.name = name
        fields.append("name")
    if description is not None:
        collection.description = description
        fields.append("description")
    if fields:
        collection.save(update_fields=fields)
    return collection


@transaction.atomic
def collection_delete(collection: Collection) -> int:
    """Delete a collection with its documents; returns how many documents went. A personal collection cannot be
    deleted (409 `conflict`): clear it instead, or hand it over (then it is an ordinary one)."""
    if collection.personal:
        raise AppError("conflict", "A personal collection cannot be deleted; clear its documents instead "
                       "(DELETE /api/kb/clear), or hand it over.", 409)
    before, after = _stamp_change(collection.key)
    _, deleted = Document.objects.filter(collection=collection).only("id").delete()
    collection.delete()
    transaction.on_commit(partial(index.matrix_remove, owner_id=collection.key, before=before, after=after,
                                  document_id=None))
    return deleted.get(Document._meta.label, 0)


def collection_transfer(collection: Collection, new_owner) -> None:
    """organisation.policy's transfer of a collection (in the caller's transaction): it becomes an ordinary
    collection of the new owner (a personal one stops being personal), renamed "<name> (from <old owner>)"
    when the new owner has that name already; its documents go with it, and count against the new owner's
    quota from now (a transfer is never refused for the quota)."""
    old_owner = get_user_model().objects.filter(pk=collection.owner_id).first()
    name = collection.name
    if _name_taken(new_owner.pk, name):
        base = f"{name} (from {old_owner.get_username() if old_owner else 'a former user'})"
        name, number = base[:NAME_MAX], 1
        while _name_taken(new_owner.pk, name):
            number += 1
            suffix = f" {number}"
            name = base[:NAME_MAX - len(suffix)] + suffix
    collection.owner = new_owner
    collection.name = name
    collection.personal = False
    collection.save(update_fields=["owner", "name", "personal"])


# --- documents --------------------------------------------------------------------------------------

def _stamp_change(owner_id: int) -> tuple[int, int]:
    """Lock the collection's stamp (owner_id: its key) and give it a new value; returns (before, after)."""
    stamp = index.stamp_lock(owner_id)
    before = stamp.value
    stamp.value = secrets.randbits(63) or 1  # never 0, the value of "no writes yet"
    stamp.save(update_fields=["value", "changed_at"])
    return before, stamp.value


def document_ingest(*, owner_id: int, filename: str, content: str, content_type: str = TEXT,
                    collection: Collection | None = None) -> Document:
    """Add a document sent as text (plain, Markdown, or HTML turned into text), with all its chunks or nothing.

    owner_id: who adds it; collection: where (the caller checked the user may edit it); None: the user's
    personal collection, made on first use.

    Raises AppError 415 `unsupported_media_type`, 400 `empty_document`, 400 `invalid` (filename), 413
    `quota_exceeded` (details: used_bytes, quota_bytes, size), 507 `insufficient_storage` (a nearly full disk).
    """
    extracted = text_from_content(filename=filename, content_type=content_type, content=content)
    return _document_store(owner_id=owner_id, filename=filename, text=extracted.text, collection=collection,
                           content_type=extracted.content_type, size=len(content.encode("utf-8")))


def document_ingest_upload(*, owner_id: int, filename: str, content_type: str, data: bytes,
                           collection: Collection | None = None) -> Document:
    """Add an uploaded file (text, Markdown, HTML or PDF) as a document, with all its chunks or nothing (owner_id
    and collection as in document_ingest).

    Raises AppError 415 `unsupported_media_type`, 400 `unreadable_document`, `empty_document` or `invalid`, 413
    `quota_exceeded`, 507 `insufficient_storage`.
    """
    extracted = text_from_upload(filename=filename, content_type=content_type, data=data)
    return _document_store(owner_id=owner_id, filename=filename, text=extracted.text, collection=collection,
                           content_type=extracted.content_type, size=len(data))


def _document_store(*, owner_id: int, filename: str, text: str, content_type: str, size: int,
                    collection: Collection | None) -> Document:
    if collection is None:
        # Made (and committed, outside a caller's transaction) before the document's transaction: two first
        # adds at once must not wait on each other's uncommitted collection while holding their locks.
        collection = collection_personal(owner_id)
    return _document_insert(owner_id=owner_id, filename=filename, text=text, content_type=content_type, size=size,
                            collection=collection)


@transaction.atomic
def _document_insert(*, owner_id: int, filename: str, text: str, content_type: str, size: int,
                     collection: Collection) -> Document:
    free_space_check()
    key, quota_owner = collection.key, collection.owner_id
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
    _quota_check(owner_id=quota_owner, size=reserved)  # before the embedding: no work for a document that cannot fit
    vectors = embed_many(texts, tokens)
    before, after = _stamp_change(key)  # first: a concurrent rebuild must not see half of this write
    # Again under the locks of the stamp and of the quota's owner (the user row), held until commit: of two
    # concurrent adds to any of one owner's collections, the second counts the first.
    list(get_user_model().objects.select_for_update().filter(pk=quota_owner).values_list("pk"))
    _quota_check(owner_id=quota_owner, size=reserved)
    document = Document.objects.create(owner_id=owner_id, collection=collection, filename=filename,
                                       content_type=content_type, content=text, size=size, stored_bytes=stored)
    chunk_ids = _chunks_insert(document=document, texts=texts, vectors=vectors)
    lexical.index_add(owner_id=key, chunk_ids=chunk_ids, texts=terms_texts)  # in this transaction
    document.chunk_count = len(chunk_ids)
    transaction.on_commit(partial(index.matrix_add, owner_id=key, before=before, after=after,
                                  document_id=document.pk, chunk_ids=chunk_ids, vectors=vectors))
    if with_dense:
        # The dense model embeds 3 to 75 chunks a second: never inside the request. The document is searchable
        # now by the hash vectors and the lexical index; the dense ranker takes it once all its chunks have
        # their vectors (knowledge/dense_index.py). On the ORM broker the task commits with the document.
        taskqueue.enqueue_with_commit(DENSE_TASK, [(key,)])
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
def document_delete(*, document_id: uuid.UUID, owner_id: int | None = None) -> None:
    """Delete a document and its chunks (the caller checked the user may edit its collection). owner_id: only a
    document of a collection that user owns. Raises AppError 404 `not_found`."""
    documents = Document.objects.filter(pk=document_id)
    if owner_id is not None:
        documents = documents.filter(collection__owner_id=owner_id)
    key = documents.values_list("collection__key", flat=True).first()
    if key is None:
        raise AppError("not_found", "No such document.", 404)
    before, after = _stamp_change(key)
    Document.objects.filter(pk=document_id, collection__key=key).only("id").delete()  # not the content
    transaction.on_commit(partial(index.matrix_remove, owner_id=key, before=before, after=after,
                                  document_id=document_id))


@transaction.atomic
def documents_clear(*, owner_id: int | None = None, collection: Collection | None = None) -> int:
    """Delete all the documents of a collection (None: owner_id's personal collection); returns how many."""
    if collection is None:
        collection = personal_collection_of(owner_id)
        if collection is None:
            return 0
    before, after = _stamp_change(collection.key)
    _, deleted = Document.objects.filter(collection=collection).only("id").delete()  # not the contents
    transaction.on_commit(partial(index.matrix_remove, owner_id=collection.key, before=before, after=after,
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
    """The task queued by each add when the dense model is installed: embed the chunks of the collection
    (owner_id: its key) that lack a vector.

    Every chunk of the collection still without one is embedded, not only the new document's: a task lost to a
    restart (Redis broker: queued after commit) is made good by the collection's next add, and by
    `manage.py kb_dense_backfill`. Two tasks running at once fill each chunk once (_dense_fill updates only a
    chunk still without a vector). Returns the chunks filled; 0 when the model is not (or no longer) available.
    """
    if not dense.available():
        return 0
    return dense_backfill(collection_key=owner_id)[1]


def dense_backfill(*, owner_id: int | None = None, on_document=None,
                   collection_key: int | None = None) -> tuple[int, int]:
    """Give the chunks stored without a dense vector (before the model was installed) theirs, document by document.

    owner_id: only the collections that user owns; collection_key: only that collection.
    Each document is one transaction that changes its collection's stamp, so every process's dense matrix reads it
    as a new document at its next search. Its stored_bytes grows by 1,536 bytes per chunk; a document already
    stored is never refused for the quota. Returns (documents, chunks) filled. Raises DenseUnavailable when
    the model is not installed.
    """
    if not dense.available():
        raise dense.DenseUnavailable(f"The dense embedding model is not installed ({dense.INSTALL_HINT}).")
    pending = Document.objects.filter(chunks__dense__isnull=True)
    if owner_id is not None:
        pending = pending.filter(collection__owner_id=owner_id)
    if collection_key is not None:
        pending = pending.filter(collection__key=collection_key)
    documents = chunks = 0
    for document_id, document_owner in pending.values_list("id", "collection__key").distinct().order_by("id"):
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

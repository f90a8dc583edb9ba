"""Knowledge base data: collections (shareable, organisation/policy.py), their documents, the documents' chunks
with embedding vectors, and a per-collection change stamp.

Invariants:
- a collection's name is 1-100 characters and unique per owner; a user owns at most one personal collection
  (made on first use; a transferred one stops being personal);
- every document belongs to exactly one collection; the knowledge-base quota counts the documents of the
  collections a user owns (Document.owner is only who added it);
- a collection's `key` is unique and never changes: it names the collection in the search indexes (the lexical
  tables' owner column, the stamp, the in-memory matrices). A personal collection takes its owner's user id
  when that is free (so migration 0008 left every index entry as it was), any other a number from KEY_BASE up.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.core.validators import MinLengthValidator
from django.db import models

from organisation.models import GrantBase, Shareable

KEY_BASE = 1 << 30  # keys of non-personal collections: above any user id, within PostgreSQL's integer
NAME_MAX = 100


class Collection(Shareable):
    """A named set of documents that its owner may share (organisation.policy: viewers search it, editors add
    and delete documents, the owner and admins delete, share and hand it over)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="kb_collections")
    name = models.CharField(max_length=NAME_MAX, validators=[MinLengthValidator(1)])
    description = models.TextField(blank=True, default="")
    personal = models.BooleanField(default=False, help_text="The owner's personal collection, made on first use: "
                                                            "where documents go when no collection is named.")
    key = models.PositiveIntegerField(unique=True, editable=False,
                                      help_text="The collection's number in the search indexes (never changes).")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "name"], name="kb_collection_owner_name"),
            models.UniqueConstraint(fields=["owner"], condition=models.Q(personal=True),
                                    name="kb_collection_one_personal"),
        ]

    def __str__(self) -> str:
        return self.name


class CollectionGrant(GrantBase):
    resource = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="grants")

    class Meta:
        constraints = GrantBase.grant_constraints("kb_collection")


class Document(models.Model):
    """A text added to a collection; its chunks are made once, at ingest, and never edited."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="documents")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="kb_documents",
                              help_text="Who added it; null once that user is gone (the quota counts the collection's "
                                        "owner).")
    filename = models.CharField(max_length=255)
    content_type = models.CharField(max_length=100, default="text/plain")
    size = models.PositiveBigIntegerField(help_text="Bytes of the source as added (the upload, or UTF-8 text).")
    content = models.TextField(help_text="The text that was chunked.")
    stored_bytes = models.PositiveBigIntegerField(
        default=0, help_text="What the document holds in the database, as the knowledge-base quota counts it: "
                             "the text's UTF-8 bytes, plus each chunk's UTF-8 bytes, its 1,024-byte vector, "
                             "its full-text index terms (counted twice) and its 1,536-byte dense vector when it "
                             "has one.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "id"]
        indexes = [models.Index(fields=["collection", "-created_at"], name="kb_document_collection_created")]

    def __str__(self) -> str:
        return self.filename


class Chunk(models.Model):
    """A piece of a document (at most 500 characters) with its 256-d float32 vector (and the dense model's)."""

    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks")
    index = models.PositiveIntegerField(help_text="Position of the chunk in its document, from 0.")
    text = models.TextField()
    vector = models.BinaryField(help_text="256 little-endian float32 values, L2-normalised.")
    dense = models.BinaryField(
        null=True, blank=True, editable=False,
        help_text="The dense model's vector (knowledge/dense.py: 384 little-endian float32 values, L2-normalised); "
                  "null when the model was not installed at ingest (manage.py kb_dense_backfill fills it).")

    class Meta:
        ordering = ["document_id", "index"]  # by the column: ordering by "document" would join documents
        constraints = [models.UniqueConstraint(fields=["document", "index"], name="kb_chunk_document_index")]

    def __str__(self) -> str:
        return f"{self.document_id} #{self.index}"


class KnowledgeStamp(models.Model):
    """Changes whenever a collection's chunks change, in the same transaction as the change.

    Each process keeps a collection's vectors as one matrix in memory; a stamp different from the one the
    matrix was built at tells it the matrix is stale. The stamp is random rather than a counter so that a
    rolled-back transaction or a restored backup can never repeat a value a process has already seen.
    Keyed by Collection.key (no foreign key: a search reads it by the key in one indexed probe).
    """

    key = models.PositiveIntegerField(primary_key=True)
    value = models.BigIntegerField(default=0)
    changed_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.key}: {self.value}"

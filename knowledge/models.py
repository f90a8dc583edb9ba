"""Knowledge base data: documents, their chunks with embedding vectors, and a per-owner change stamp."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class Document(models.Model):
    """A text a user added to their knowledge base; its chunks are made once, at ingest, and never edited."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="kb_documents")
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
        indexes = [models.Index(fields=["owner", "-created_at"], name="kb_document_owner_created")]

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
    """Changes whenever the owner's chunks change, in the same transaction as the change.

    Each process keeps the owner's vectors as one matrix in memory; a stamp different from the one the
    matrix was built at tells it the matrix is stale. The stamp is random rather than a counter so that a
    rolled-back transaction or a restored backup can never repeat a value a process has already seen.
    """

    owner = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True,
                                 related_name="kb_stamp")
    value = models.BigIntegerField(default=0)
    changed_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.owner_id}: {self.value}"

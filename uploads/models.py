"""Uploaded files: one row per file (its bytes live under the data directory's media/), and a per-owner row
that is locked while a quota decision is made. The tables keep the names the voice app gave them
(Meta.db_table), so that no upgrade has to rename them (uploads/migrations/0001_initial.py says why)."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class Upload(models.Model):
    """A file a user uploaded. Its type is what its bytes are (sniffed at upload), never what the client said;
    the client's filename is only a label, and the bytes are stored under a generated name."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="uploads")
    filename = models.CharField(max_length=255, help_text="The client's name for it, cleaned; never a path.")
    content_type = models.CharField(max_length=100, help_text="Sniffed from the bytes.")
    size = models.PositiveBigIntegerField(help_text="Bytes.")
    sha256 = models.CharField(max_length=64)
    is_image = models.BooleanField(default=False, help_text="A PNG, JPEG, GIF or WebP image Pillow has verified.")
    stored_as = models.CharField(max_length=100, unique=True,
                                 help_text="The file's name in the media storage (generated).")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "voice_upload"
        ordering = ["-created_at", "id"]
        indexes = [models.Index(fields=["owner", "-created_at"], name="upload_owner_created")]

    def __str__(self) -> str:
        return self.filename


class UploadQuota(models.Model):
    """One per owner who has uploaded: its row is locked for the time a quota check and the insert it allows
    take, so that two concurrent uploads cannot both fit in the same free space."""

    owner = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True,
                                 related_name="upload_quota")

    class Meta:
        db_table = "voice_uploadquota"

    def __str__(self) -> str:
        return f"uploads of {self.owner_id}"

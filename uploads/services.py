"""Writes of the uploads store: storing a file (its type sniffed from its bytes, within the size limit and the
owner's quota), deleting one, and the start-up sweep of files no row names. A file is written before its row
and removed when the insert fails (a failed upload leaves neither); a deleted row's file goes once the delete
has committed.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import transaction

from agentsite.core.diskspace import free_space_check
from agentsite.core.errors import AppError
from uploads import selectors
from uploads.models import Upload, UploadQuota

logger = logging.getLogger(__name__)

UPLOADS_DIR = "uploads"  # under MEDIA_ROOT (the data directory's media/)
MAX_FILENAME = 255
# Images are decoded in full (to catch a truncated file) up to this many pixels; larger ones are verified
# without decoding, so that a small file cannot make the server allocate gigabytes.
FULL_DECODE_PIXELS = 4096 * 4096
# Files without a row younger than this may be an upload another process is finishing: the sweep leaves them.
ORPHAN_MIN_AGE_S = 3600


@dataclass(frozen=True)
class Sniffed:
    content_type: str
    is_image: bool


# --- writes -----------------------------------------------------------------------------------------

def upload_create(*, owner_id: int, filename: str, data: bytes) -> Upload:
    """Store a file for owner_id. Its type comes from its bytes; `filename` is kept as a label only.

    Raises AppError 400 `invalid` (empty), 400 `invalid_image` (an image Pillow cannot read), 413
    `payload_too_large` (over the size limit), 413 `quota_exceeded` (details: used, quota and size), 507
    `insufficient_storage` (the disk is nearly full) and 503 `unavailable` (the file could not be written).
    """
    size_check(len(data))
    free_space_check()
    if not data:
        raise AppError("invalid", "The file is empty.", 400, {"file": ["The file is empty."]})
    sniffed = sniff(data, filename)
    _quota_check(owner_id=owner_id, size=len(data))  # early and unlocked: no write for a file that cannot fit
    upload_id = uuid.uuid4()
    stored_as = _file_write(f"{UPLOADS_DIR}/{upload_id.hex[:2]}/{upload_id.hex}", data)
    try:
        return _upload_insert(upload_id=upload_id, owner_id=owner_id, filename=filename_clean(filename),
                              sniffed=sniffed, data=data, stored_as=stored_as)
    except BaseException:
        _file_delete(stored_as)
        raise


@transaction.atomic
def _upload_insert(*, upload_id: uuid.UUID, owner_id: int, filename: str, sniffed: Sniffed, data: bytes,
                   stored_as: str) -> Upload:
    _quota_check(owner_id=owner_id, size=len(data), lock=True)
    upload = Upload.objects.create(id=upload_id, owner_id=owner_id, filename=filename,
                                   content_type=sniffed.content_type, size=len(data),
                                   sha256=hashlib.sha256(data).hexdigest(), is_image=sniffed.is_image,
                                   stored_as=stored_as)
    logger.info("Upload %s stored: %s, %d bytes", upload.pk, upload.content_type, upload.size)
    return upload


@transaction.atomic
def upload_delete(*, owner_id: int, upload_id: uuid.UUID | str) -> None:
    """Delete the owner's upload and, once that has committed, its file. Raises AppError 404 `not_found`."""
    upload = selectors.upload_get_for(owner_id=owner_id, upload_id=upload_id)
    stored_as = upload.stored_as
    upload.delete()
    transaction.on_commit(lambda: _file_delete(stored_as))


def size_check(size: int) -> None:
    """Raises AppError 413 `payload_too_large` for a file over AGENTSITE_UPLOAD_MAX_BYTES."""
    limit = settings.AGENTSITE_UPLOAD_MAX_BYTES
    if size > limit:
        raise AppError("payload_too_large", f"A file may be at most {_mb(limit)} MB; this one is {_mb(size)} MB.",
                       413, {"size": size, "max_bytes": limit})


def _quota_check(*, owner_id: int, size: int, lock: bool = False) -> None:
    if lock:
        # Held until the insert commits: a concurrent upload of the same owner waits here, then counts this one.
        UploadQuota.objects.get_or_create(owner_id=owner_id)
        UploadQuota.objects.select_for_update().get(owner_id=owner_id)
    quota = settings.AGENTSITE_UPLOAD_QUOTA_BYTES
    if not quota:
        return
    used = selectors.upload_usage_for(owner_id=owner_id)
    if used + size > quota:
        raise AppError("quota_exceeded", f"This file ({_mb(size)} MB) does not fit in your upload quota: "
                       f"{_mb(used)} MB of {_mb(quota)} MB are used. Delete uploads to make room.", 413,
                       {"used_bytes": used, "quota_bytes": quota, "size": size})


def _file_write(name: str, data: bytes) -> str:
    """Write the bytes under a new name; raises AppError 503 `unavailable` (a full or read-only disk), leaving
    no partial file behind."""
    try:
        return default_storage.save(name, ContentFile(data))
    except OSError as exc:
        logger.exception("Could not write the upload file %s", name)
        _file_delete(name)
        raise AppError("unavailable", "The server could not store the file (its disk may be full or "
                       "read-only).", 503) from exc


def _file_delete(stored_as: str) -> None:
    try:
        default_storage.delete(stored_as)
    except OSError:  # the row is gone either way; the start-up sweep retries files left behind
        logger.exception("Could not delete the upload file %s", stored_as)


def uploads_sweep_orphans(*, min_age_s: float = ORPHAN_MIN_AGE_S) -> int:
    """Delete files under media/uploads that no row names (a crash mid-upload, a deleted user); returns how many.

    Runs at service start (agentsite.core.startup); files younger than min_age_s are left alone.
    """
    root = Path(settings.MEDIA_ROOT) / UPLOADS_DIR
    if not root.is_dir():
        return 0
    known = set(Upload.objects.values_list("stored_as", flat=True))
    cutoff = time.time() - min_age_s
    removed = 0
    for path in root.glob("*/*"):
        name = path.relative_to(settings.MEDIA_ROOT).as_posix()
        if name not in known and path.is_file() and path.stat().st_mtime < cutoff:
            path.unlink(missing_ok=True)
            removed += 1
    if removed:
        logger.info("Removed %d upload files that no upload row named", removed)
    return removed


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):.1f}".removesuffix(".0")


# --- names --------------------------------------------------------------------------------------------

def filename_clean(name: str) -> str:
    """The client's filename as a label: its last path segment, printable characters only, at most 255."""
    name = name.replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(char for char in name if char.isprintable()).strip()
    if name in ("", ".", ".."):
        return "upload"
    if len(name) > MAX_FILENAME:
        suffix = PurePosixPath(name).suffix
        suffix = suffix if len(suffix) <= 16 else ""
        name = name[:MAX_FILENAME - len(suffix)] + suffix
    return name


# --- sniffing -----------------------------------------------------------------------------------------
# The type is what the bytes are: the client's Content-Type is never read, and the filename's extension only
# names the kind of a file that is already known to be text (Markdown, CSV, JSON...), never anything else.

_PILLOW_FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}
_IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a")
_MAGIC = [
    (b"%PDF-", "application/pdf"),
    (b"PK\x03\x04", "application/zip"),
    (b"\x1f\x8b", "application/gzip"),
    (b"7z\xbc\xaf\x27\x1c", "application/x-7z-compressed"),
    (b"OggS\x00", "audio/ogg"),
    (b"fLaC", "audio/flac"),
    (b"\x1a\x45\xdf\xa3", "video/webm"),
    (b"II*\x00", "image/tiff"),
    (b"MM\x00*", "image/tiff"),
]
# Short printable signatures: a text file may start with them too, so they are only tried on what is not text.
_WEAK_MAGIC = [(b"ID3", "audio/mpeg"), (b"BM", "image/bmp")]
_RIFF = {b"WAVE": "audio/wav", b"AVI ": "video/x-msvideo"}
_FTYP = {b"heic": "image/heic", b"heix": "image/heic", b"mif1": "image/heif", b"avif": "image/avif",
         b"M4A ": "audio/mp4"}
_TEXT_BY_EXTENSION = {
    ".md": "text/markdown", ".markdown": "text/markdown", ".csv": "text/csv", ".tsv": "text/tab-separated-values",
    ".json": "application/json", ".xml": "application/xml", ".yaml": "application/yaml", ".yml": "application/yaml",
    ".html": "text/html", ".htm": "text/html",
}
# WHATWG MIME sniffing's HTML patterns: a document that starts with one of these tags is HTML to a browser.
_HTML_START = re.compile(r"<(?:!--|(?:!doctype\s+html|html|head|script|iframe|h1|div|font|table|a|style|title|b|"
                         r"body|br|p)[\s/>])", re.IGNORECASE)


def sniff(data: bytes, filename: str = "") -> Sniffed:
    """What the bytes are. Raises AppError 400 `invalid_image` for a PNG, JPEG, GIF or WebP Pillow cannot read."""
    if data.startswith(_IMAGE_MAGIC) or (data[:4] == b"RIFF" and data[8:12] == b"WEBP"):
        return Sniffed(_image_type(data), True)
    binary = _binary_type(data)
    if binary:
        return Sniffed(binary, False)
    text = text_decode(data)
    if text is not None:
        return Sniffed(_text_type(text, filename), False)
    for magic, mime in _WEAK_MAGIC:
        if data.startswith(magic):
            return Sniffed(mime, False)
    if len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0:  # an MPEG audio frame, no ID3 tag
        return Sniffed("audio/mpeg", False)
    return Sniffed("application/octet-stream", False)


def _image_type(data: bytes) -> str:
    # Here, not at the top: every process imports this module at start-up, and only an image upload needs Pillow.
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data), formats=list(_PILLOW_FORMATS)) as image:
            kind, pixels = image.format, image.width * image.height
            image.verify()
        if pixels <= FULL_DECODE_PIXELS:
            with Image.open(io.BytesIO(data), formats=[kind]) as image:
                image.load()
    except Image.DecompressionBombError as exc:
        raise AppError("invalid_image", "The image has too many pixels to be read safely.", 400) from exc
    except Exception as exc:  # noqa: BLE001 - Pillow raises many types on malformed input; it is untrusted
        logger.info("An upload that looks like an image could not be read: %s", exc)
        raise AppError("invalid_image", "The file looks like an image but cannot be read (damaged or "
                       "truncated).", 400) from exc
    return _PILLOW_FORMATS[kind]


def _binary_type(data: bytes) -> str | None:
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF":
        return _RIFF.get(data[8:12])
    if data[4:8] == b"ftyp":
        return _FTYP.get(data[8:12], "video/mp4")
    return None


def text_decode(data: bytes) -> str | None:
    """The bytes as text (UTF-8, or UTF-16 with a byte-order mark), or None when they are not text."""
    try:
        text = data.decode("utf-16") if data.startswith((b"\xff\xfe", b"\xfe\xff")) else data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None
    sample = text[:4096]
    controls = sum(1 for char in sample if ord(char) < 32 and char not in "\t\n\r\f\v\x1b")
    return None if controls > max(8, len(sample) // 100) else text


def _text_type(text: str, filename: str) -> str:
    head = text[:1024].lstrip()
    lowered = head.lower()
    if lowered.startswith("<svg") or (lowered.startswith("<?xml") and "<svg" in lowered):
        return "image/svg+xml"
    if lowered.startswith("<?xml"):
        return "application/xml"
    if _HTML_START.match(head):
        return "text/html"
    return _TEXT_BY_EXTENSION.get(os.path.splitext(filename_clean(filename).lower())[1], "text/plain")

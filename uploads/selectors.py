"""Reads of the uploads store: the owner's uploads, one upload's bytes, the space used, and uploads as the
content parts a chat turn gives the model (the chat's attachment resolver)."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from django.core.files.storage import default_storage
from django.db.models import QuerySet, Sum

from agentsite.agent.multimodal import upload_part
from agentsite.agent.types import ContentPart, TextPart
from agentsite.core.errors import AppError
from knowledge.extraction import decode_text, html_text, pdf_text
from uploads.models import Upload

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

logger = logging.getLogger(__name__)

# Types whose bytes are text to the model; text/* is too. HTML and PDF are read by the knowledge base's extraction.
_TEXT_APPLICATION_TYPES = frozenset({"application/json", "application/xml", "application/yaml", "image/svg+xml"})


def upload_list_for(*, owner_id: int) -> QuerySet[Upload]:
    return Upload.objects.filter(owner_id=owner_id)


def upload_get_for(*, owner_id: int, upload_id: uuid.UUID | str) -> Upload:
    """The owner's upload. Raises AppError 404 `not_found` for another user's, a missing or a malformed id."""
    upload = upload_list_for(owner_id=owner_id).filter(pk=_uuid_or_none(upload_id)).first()
    if upload is None:
        raise AppError("not_found", "No such upload.", 404)
    return upload


def upload_read(*, upload: Upload) -> bytes:
    """The stored bytes. Raises AppError 404 `not_found` when the file is missing (logged: it should not be)."""
    try:
        with default_storage.open(upload.stored_as, "rb") as handle:
            return handle.read()
    except FileNotFoundError as exc:
        logger.error("The file of upload %s (%s) is missing from the media directory", upload.pk, upload.stored_as)
        raise AppError("not_found", "The upload's file is missing on the server.", 404) from exc


def upload_usage_for(*, owner_id: int) -> int:
    """Bytes of the owner's uploads."""
    return upload_list_for(owner_id=owner_id).aggregate(total=Sum("size"))["total"] or 0


# --- chat attachments ----------------------------------------------------------------------------------

def attachment_parts_for(owner: AbstractBaseUser, upload_ids: list[str], missing_ok: bool = False,
                         ) -> dict[str, list[ContentPart]]:
    """Each upload id of owner as the content parts the model gets (sessions_app.attachments' resolver).

    Raises AppError 404 `not_found` (details.attachments names the ids) when any id is not one of owner's
    uploads: another user's, a deleted or a malformed one. Nothing is read before every id is known. With
    missing_ok (an earlier turn's attachments), such an id becomes a note that the file is gone.
    """
    wanted = list(dict.fromkeys(str(upload_id) for upload_id in upload_ids))
    parsed = [key for key in (_uuid_or_none(upload_id) for upload_id in wanted) if key is not None]
    found = {str(upload.pk): upload for upload in upload_list_for(owner_id=owner.pk).filter(pk__in=parsed)}
    unknown = [upload_id for upload_id in wanted if _canonical(upload_id) not in found]
    if unknown and missing_ok:
        gone = [TextPart("\n\n[An attachment of this message was deleted since.]")]
        return {upload_id: [_part(found[_canonical(upload_id)])] if upload_id not in unknown else gone
                for upload_id in wanted}
    if unknown:
        raise AppError("not_found", "An attachment is not one of your uploads.", 404,
                       {"attachments": [f"No such upload: {upload_id}" for upload_id in unknown]})
    return {upload_id: [_part(found[_canonical(upload_id)])] for upload_id in wanted}


def _part(upload: Upload) -> ContentPart:
    part = upload_part(filename=upload.filename, content_type=upload.content_type, data=upload_read(upload=upload),
                       extract_text=document_text)
    # Text parts are joined as they are (a text-only message goes to `openai` as one string): a document
    # starts on a paragraph of its own after the message.
    return TextPart("\n\n" + part.text) if isinstance(part, TextPart) else part


def document_text(mime: str, filename: str, data: bytes) -> str | None:
    """A document's text for the model, through the knowledge base's extraction; None when it has none to read."""
    try:
        if mime == "application/pdf":
            return pdf_text(data)
        if mime == "text/html":
            return html_text(decode_text(data))
        if mime.startswith("text/") or mime in _TEXT_APPLICATION_TYPES:
            return decode_text(data)
    except AppError:  # unreadable: the model is told the file is there but cannot be read
        logger.info("The attachment %s could not be read as text", filename)
    return None


def _uuid_or_none(value: uuid.UUID | str) -> uuid.UUID | None:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def _canonical(upload_id: str) -> str:
    parsed = _uuid_or_none(upload_id)
    return str(parsed) if parsed else upload_id

"""Content parts in and out: uploads and tool results become parts; parts become each provider's blocks."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable
from typing import Any

from agentsite.agent.types import ContentPart, ImagePart, TextPart

logger = logging.getLogger(__name__)

# What the hosted vision models accept; other image types go in as a note rather than fail upstream.
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
# A document is cut here so one upload cannot fill the model's whole context.
MAX_DOCUMENT_CHARS = 100_000

_TEXT_TYPES = ("application/json", "application/xml", "application/x-yaml", "application/yaml",
               "application/javascript", "application/x-python", "application/csv")


# (mime type without parameters, filename, bytes) -> the document's text, or None when it cannot be read as text.
TextExtractor = Callable[[str, str, bytes], str | None]


def upload_part(*, filename: str, content_type: str, data: bytes,
                extract_text: TextExtractor | None = None) -> ContentPart:
    """An uploaded file as one content part: images as ImagePart, documents as their text with the filename.

    `extract_text` reads documents (the uploads facet passes the knowledge base's extraction); by default
    text is decoded and a PDF's pages are read with pypdf.
    """
    mime = (content_type or "").split(";")[0].strip().lower()
    if mime in IMAGE_TYPES:
        return ImagePart(mime, data)
    text = (extract_text or _document_text)(mime, filename, data)
    if text is None:
        return TextPart(f"[Attached file: {filename} ({mime or 'unknown type'}, {len(data)} bytes); "
                        "its content cannot be read as text.]")
    if not text.strip():
        return TextPart(f"[Attached file: {filename} ({mime or 'unknown type'}, {len(data)} bytes); it has no text.]")
    if len(text) > MAX_DOCUMENT_CHARS:
        text = text[:MAX_DOCUMENT_CHARS] + f"\n[... cut at {MAX_DOCUMENT_CHARS} characters]"
    return TextPart(f"[Attached file: {filename}]\n{text}\n[End of {filename}]")


def _document_text(mime: str, filename: str, data: bytes) -> str | None:
    if mime == "application/pdf" or filename.lower().endswith(".pdf"):
        return _pdf_text(data)
    if mime.startswith("text/") or mime in _TEXT_TYPES or not mime or mime == "application/octet-stream":
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            # A text/* file in a legacy encoding is still text; an unknown binary is not.
            return data.decode("latin-1") if mime.startswith("text/") else None
    return None


def _pdf_text(data: bytes) -> str | None:
    try:
        # Start-up cost: pypdf is imported on the first PDF, not by every process.
        from pypdf import PdfReader

        reader = PdfReader(io.BytesIO(data))
        return "\n\n".join(page.extract_text() or "" for page in reader.pages)
    except Exception:  # pypdf raises many types for damaged files; the upload then goes in as a note
        logger.warning("Could not read a PDF upload", exc_info=True)
        return None


def parts_from_tool_content(blocks: list[dict[str, Any]]) -> list[ContentPart]:
    """MCP-shaped tool result blocks as content parts (text and images; anything else as JSON text)."""
    parts: list[ContentPart] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            parts.append(TextPart(str(block.get("text", ""))))
        elif kind == "image" and block.get("data"):
            try:
                parts.append(ImagePart.from_base64(block.get("mimeType") or "image/png", block["data"]))
            except ValueError:
                parts.append(TextPart("[an image that was not valid base64]"))
        else:
            parts.append(TextPart(json.dumps(block, ensure_ascii=False)))
    return parts


def openai_image(part: ImagePart) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": part.data_url}}


def anthropic_image(part: ImagePart) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": part.mime_type, "data": part.base64}}


def openai_content(parts: list[ContentPart]) -> str | list[dict[str, Any]]:
    """A plain string when there is no image: several local servers accept only strings."""
    if all(isinstance(part, TextPart) for part in parts):
        return "".join(part.text for part in parts)  # type: ignore[union-attr]
    return [openai_image(part) if isinstance(part, ImagePart) else {"type": "text", "text": part.text}
            for part in parts]


def anthropic_content(parts: list[ContentPart]) -> list[dict[str, Any]]:
    """Anthropic rejects empty text blocks, so they are left out."""
    blocks: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, ImagePart):
            blocks.append(anthropic_image(part))
        elif part.text:
            blocks.append({"type": "text", "text": part.text})
    return blocks

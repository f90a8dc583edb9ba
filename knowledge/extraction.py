"""Turning an uploaded file into the text the knowledge base stores: text, Markdown, HTML or PDF."""

from __future__ import annotations

import io
import logging
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from agentsite.core.errors import AppError

logger = logging.getLogger(__name__)

TEXT, MARKDOWN, HTML, PDF = "text/plain", "text/markdown", "text/html", "application/pdf"

_ALIASES = {
    "text/x-markdown": MARKDOWN,
    "application/xhtml+xml": HTML,
    "application/x-pdf": PDF,
}
_BY_EXTENSION = {
    ".txt": TEXT, ".text": TEXT, ".log": TEXT, ".csv": TEXT, ".rst": TEXT,
    ".md": MARKDOWN, ".markdown": MARKDOWN,
    ".html": HTML, ".htm": HTML, ".xhtml": HTML,
    ".pdf": PDF,
}
# Clients often send no type or a generic one for files they do not recognise; the extension decides then.
_GENERIC = {"", "application/octet-stream", "binary/octet-stream"}
_DROPPED_TAGS = ["script", "style", "noscript", "template", "svg", "head"]


@dataclass(frozen=True)
class ExtractedText:
    text: str
    content_type: str  # one of TEXT, MARKDOWN, HTML, PDF: what the source was


def document_kind(*, filename: str, content_type: str) -> str:
    """The kind of a source. Raises AppError 415 `unsupported_media_type`."""
    declared = content_type.split(";", 1)[0].strip().lower()
    declared = _ALIASES.get(declared, declared)
    if declared in _GENERIC:
        declared = _BY_EXTENSION.get(PurePosixPath(filename.lower()).suffix, declared)
    if declared in (MARKDOWN, HTML, PDF):
        return declared
    if declared.startswith("text/"):
        return TEXT  # csv, x-rst, x-python…: plain text to the knowledge base
    raise AppError("unsupported_media_type", "Add text, Markdown, HTML or PDF documents.", 415,
                   {"content_type": declared or "unknown", "supported": [TEXT, MARKDOWN, HTML, PDF]})


def text_from_upload(*, filename: str, content_type: str, data: bytes) -> ExtractedText:
    """The text of an uploaded file. Raises AppError 415 `unsupported_media_type`, 400 `unreadable_document`."""
    kind = document_kind(filename=filename, content_type=content_type)
    if kind == PDF:
        return ExtractedText(pdf_text(data), PDF)
    text = decode_text(data, content_type)
    return ExtractedText(html_text(text) if kind == HTML else text, kind)


def text_from_content(*, filename: str, content_type: str, content: str) -> ExtractedText:
    """The text of a document sent as a JSON string; HTML is turned into text, PDF cannot come this way."""
    kind = document_kind(filename=filename, content_type=content_type or TEXT)
    if kind == PDF:
        raise AppError("unsupported_media_type", "Upload a PDF as a multipart `file`, not as JSON text.", 415,
                       {"content_type": PDF})
    return ExtractedText(html_text(content) if kind == HTML else content, kind)


def decode_text(data: bytes, content_type: str = "") -> str:
    """UTF-8 (with or without BOM), UTF-16 with BOM, or the declared charset. Raises 400 `unreadable_document`."""
    charset = _charset(content_type)
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        charset = "utf-16"
    try:
        text = data.decode(charset or "utf-8-sig")
    except (UnicodeDecodeError, LookupError) as exc:
        raise AppError("unreadable_document", "The file is not readable text (expected UTF-8).", 400) from exc
    if _looks_binary(text):
        raise AppError("unreadable_document", "The file looks binary, not text.", 400)
    return text


def _charset(content_type: str) -> str:
    match = re.search(r"charset=\"?([\w.:-]+)", content_type, re.IGNORECASE)
    return match.group(1) if match else ""


def _looks_binary(text: str) -> bool:
    sample = text[:4096]
    controls = sum(1 for char in sample if ord(char) < 32 and char not in "\t\n\r\f\v")
    return controls > max(8, len(sample) // 100)


def html_text(html: str) -> str:
    """The visible text of an HTML page, one block per line."""
    # Imported here, as pdf_text's pypdf: every Django start imports this module (the admin imports the
    # services), and these two cost each process about 0.3 s for the rare upload that needs them.
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    for tag in soup(_DROPPED_TAGS):
        tag.decompose()
    lines = (line.strip() for line in soup.get_text("\n").splitlines())
    return "\n".join(line for line in lines if line)


def pdf_text(data: bytes) -> str:
    """The text of each page of a PDF, pages separated by a blank line. Raises 400 `unreadable_document`."""
    # Start-up cost: pypdf is imported on the first PDF, not by every process.
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            reader.decrypt("")
        pages = [page.extract_text() or "" for page in reader.pages]
    except Exception as exc:  # noqa: BLE001 - pypdf raises many types on malformed input; it is untrusted
        logger.info("Unreadable PDF upload: %s", exc)
        raise AppError("unreadable_document", "The PDF could not be read (damaged or encrypted).", 400) from exc
    return "\n\n".join(page.strip() for page in pages if page.strip())


def normalize_text(text: str) -> str:
    """Line ends as \\n, and no NUL characters (PostgreSQL text cannot hold them)."""
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")

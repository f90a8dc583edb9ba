"""Content parts: uploads in, each provider's blocks out."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest

from agentsite.agent.multimodal import (
    anthropic_content,
    openai_content,
    parts_from_tool_content,
    upload_part,
)
from agentsite.agent.types import ImagePart, Message, TextPart
from tests.knowledge.conftest import minimal_pdf as pdf_of_lines

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
ROOT = Path(__file__).resolve().parents[2]


def test_an_image_part_round_trips_through_a_data_url():
    part = ImagePart("image/png", PNG)

    assert ImagePart.from_data_url(part.data_url) == part
    assert ImagePart.from_base64("image/png", base64.b64encode(PNG).decode()) == part
    assert "bytes" in repr(part) and "IHDR" not in repr(part)


@pytest.mark.parametrize("bad", ["https://example.com/cat.png", "data:image/png,rawtext", "data:image/png;base64,%%%"])
def test_an_image_that_is_not_a_base64_data_url_is_refused(bad):
    with pytest.raises(ValueError):
        ImagePart.from_data_url(bad)


def test_an_uploaded_image_becomes_an_image_url_for_openai_and_a_base64_source_for_anthropic():
    part = upload_part(filename="cat.png", content_type="image/png", data=PNG)
    encoded = base64.b64encode(PNG).decode()

    assert part == ImagePart("image/png", PNG)
    assert openai_content([TextPart("What is it?"), part]) == [
        {"type": "text", "text": "What is it?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{encoded}"}}]
    assert anthropic_content([TextPart("What is it?"), part]) == [
        {"type": "text", "text": "What is it?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": encoded}}]


def test_an_uploaded_text_document_becomes_a_text_part_with_its_filename():
    part = upload_part(filename="notes.md", content_type="text/markdown; charset=utf-8", data="# Notes\nÉté".encode())

    assert part == TextPart("[Attached file: notes.md]\n# Notes\nÉté\n[End of notes.md]")


def minimal_pdf(text: str) -> bytes:
    """A one-page PDF showing `text` (the knowledge base tests' maker, one line)."""
    return pdf_of_lines([text])


def test_an_uploaded_pdf_becomes_its_text():
    part = upload_part(filename="report.pdf", content_type="application/pdf", data=minimal_pdf("Quarterly report"))

    assert part.text.startswith("[Attached file: report.pdf]\nQuarterly report")


def test_an_upload_that_is_not_text_is_described_not_dumped():
    part = upload_part(filename="song.mp3", content_type="audio/mpeg", data=b"\xff\xfb\x90\x00" * 10)

    assert part == TextPart("[Attached file: song.mp3 (audio/mpeg, 40 bytes); its content cannot be read as text.]")


def test_text_only_content_goes_to_openai_as_a_plain_string():
    assert openai_content([TextPart("a"), TextPart("b")]) == "ab"
    assert anthropic_content([TextPart(""), TextPart("b")]) == [{"type": "text", "text": "b"}]


def test_mcp_tool_content_becomes_parts():
    blocks = [{"type": "text", "text": "hi"}, {"type": "image", "data": base64.b64encode(PNG).decode(),
                                               "mimeType": "image/png"},
              {"type": "resource", "resource": {"uri": "file:///x", "text": "x"}}]

    parts = parts_from_tool_content(blocks)

    assert parts[:2] == [TextPart("hi"), ImagePart("image/png", PNG)]
    assert parts[2].text.startswith('{"type": "resource"')


def test_a_message_exposes_its_text_and_images():
    message = Message("user", [TextPart("a"), ImagePart("image/png", PNG), TextPart("b")])

    assert (message.text, message.images) == ("ab", [ImagePart("image/png", PNG)])
    assert Message("user", "plain").parts == [TextPart("plain")]


@pytest.mark.e2e
def test_the_runtime_registers_its_builtin_tools_on_import_without_django_app_loading():
    code = ("import asyncio\n"
            "from agentsite.agent.config import AgentSettings\n"
            "from agentsite.agent.tools import ToolContext, registry\n"
            "for ctx in (ToolContext(is_admin=True), ToolContext()):\n"
            "    tools = asyncio.run(registry.list_tools(ctx, AgentSettings()))\n"
            "    print(sorted(tool.name for tool in tools))\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["['computer_screenshot', 'web_fetch', 'web_search']",
                                          "['web_fetch', 'web_search']"]  # the screenshot is an admin's

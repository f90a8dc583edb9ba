"""Uploads fixtures: a media directory of the test's own, a live server, and small files made on the spot."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import pytest
from PIL import Image

from tests.knowledge.conftest import minimal_pdf as pdf_of_lines
from tests.server import LiveServer


@pytest.fixture(scope="session")
def live():
    """One real daphne server for the uploads' end-to-end tests."""
    server = LiveServer(command="daphne", env={"AGENTSITE_LOGIN_RATE_LIMIT": "1000"}).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def headers(live) -> dict[str, str]:
    return {"Authorization": f"Bearer {live.login()['token']}"}


@pytest.fixture
def media(settings, tmp_path) -> Path:
    """MEDIA_ROOT in this test's own directory (tmp_path/media); tmp_path holds nothing else."""
    root = tmp_path / "media"
    settings.MEDIA_ROOT = root
    return root


def stored_files(root: Path) -> list[Path]:
    """Every file under root (the media directory, or the directory around it)."""
    return sorted(path for path in root.rglob("*") if path.is_file()) if root.exists() else []


def image_bytes(fmt: str = "PNG", size: tuple[int, int] = (4, 3), color: tuple[int, int, int] = (200, 30, 60)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format=fmt)
    return buffer.getvalue()


def png_with_header(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height pixels, with one tiny (invalid) data chunk: cheap to make, and
    what a decompression bomb looks like to a reader that trusts the header."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00")) + chunk(b"IEND", b"")


def minimal_pdf(text: str) -> bytes:
    """A one-page PDF showing `text` (the knowledge base tests' maker, one line)."""
    return pdf_of_lines([text])

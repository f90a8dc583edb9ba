"""A request whose head is too large answers 431 in its path's envelope, on a real daphne server (it was dropped
without an answer when one line passed 16,384 bytes, and a bare 400 when the whole head did): the request line
and the header lines (CRLFs not counted) may total 16,384 bytes, and there may be 500 headers; one byte or one
header past either is 431 `headers_too_large`, with the security headers."""

from __future__ import annotations

import json
import socket
import time

import pytest

pytestmark = pytest.mark.e2e

LIMIT = 16384
MAX_HEADERS = 500


def _exchange(server, head_lines: list[bytes]) -> tuple[int, dict[str, str], bytes]:
    """Send a request with these lines (the request line first) and read the whole answer."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"\r\n".join(head_lines) + b"\r\n\r\n")
        answer, deadline = b"", time.monotonic() + 10
        while time.monotonic() < deadline:
            head, _, body = answer.partition(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), None)
            if length is not None and len(body) >= length:
                break
            data = sock.recv(65536)
            if not data:
                break
            answer += data
    assert answer, "the server closed the connection without an answer"
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in header_lines)}
    return int(status_line.split()[1]), headers, body


def _head_of_total(server, path: str, total: int) -> list[bytes]:
    """Lines whose lengths sum to `total` (the last header padded to fit)."""
    lines = [f"GET {path} HTTP/1.1".encode(), f"Host: 127.0.0.1:{server.port}".encode(), b"Connection: close"]
    used = sum(len(line) for line in lines) + len(b"X-Pad: ")
    return [*lines, b"X-Pad: " + b"a" * (total - used)]


def _assert_431(status: int, headers: dict[str, str], body: bytes) -> None:
    assert status == 431, (status, body[:200])
    assert json.loads(body)["error"]["code"] == "headers_too_large"
    assert headers["x-content-type-options"] == "nosniff" and headers["connection"] == "close"


@pytest.mark.parametrize("path", ["/api/health", "/v1/models"])
def test_a_head_at_the_limit_is_served_and_one_byte_past_is_431(server, path):
    at = _head_of_total(server, path, LIMIT)
    assert sum(len(line) for line in at) == LIMIT
    status, _, body = _exchange(server, at)
    assert status == 200, body[:200]
    _assert_431(*_exchange(server, _head_of_total(server, path, LIMIT + 1)))


def test_one_header_line_longer_than_the_limit_is_431_not_a_dropped_connection(server):
    lines = [b"GET /api/health HTTP/1.1", b"Host: 127.0.0.1", b"X-Pad: " + b"a" * (2 * LIMIT)]
    status, headers, body = _exchange(server, lines)
    _assert_431(status, headers, body)
    assert "details" in json.loads(body)["error"]  # the /api envelope


def test_500_headers_are_served_and_501_are_431(server):
    def head(count: int) -> list[bytes]:
        fixed = [b"GET /api/health HTTP/1.1", b"Host: 127.0.0.1", b"Connection: close"]
        return fixed + [b"X-N%d: 1" % index for index in range(count - 2)]

    status, _, body = _exchange(server, head(MAX_HEADERS))
    assert status == 200, body[:200]
    _assert_431(*_exchange(server, head(MAX_HEADERS + 1)))

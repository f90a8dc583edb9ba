"""Uploads over real HTTP against a real daphne server: the upload path admits a 10 MB file in either
envelope while every other path keeps the 10 MB body limit, and what fails leaves no file and no row."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import socket
import stat
import time

import pytest
import requests

from tests.uploads.conftest import stored_files

pytestmark = pytest.mark.e2e

TEN_MB = 10 * 1024 * 1024


def _file(size: int) -> bytes:
    # Not text and no known signature: an application/octet-stream file of exactly `size` bytes.
    return (b"\x00\xfe" + os.urandom(1024)) * (size // 1026) + b"\x00" * (size % 1026)


def _uploads(live, headers) -> list[dict]:
    return requests.get(f"{live.base_url}/api/uploads?limit=200", headers=headers, timeout=10).json()["results"]


def _multipart_body(name: str, data: bytes, boundary: str = "agentsite-test-boundary") -> tuple[bytes, str]:
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n"
            f"Content-Type: application/octet-stream\r\n\r\n").encode()
    return head + data + f"\r\n--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def test_a_10_mb_file_goes_in_as_multipart_chunked_or_base64_json_and_comes_back_byte_for_byte(live, headers):
    data = _file(TEN_MB)
    body, content_type = _multipart_body("big.bin", data)
    pieces = (body[start:start + 1024 * 1024] for start in range(0, len(body), 1024 * 1024))
    answers = [
        requests.post(f"{live.base_url}/api/upload", files={"file": ("big.bin", data)}, headers=headers, timeout=60),
        requests.post(f"{live.base_url}/api/upload", data=pieces, timeout=60,
                      headers={**headers, "Content-Type": content_type}),
        requests.post(f"{live.base_url}/api/upload", headers=headers, timeout=60,
                      json={"filename": "big.bin", "content_base64": base64.b64encode(data).decode()}),
    ]

    assert answers[1].request.headers.get("Transfer-Encoding") == "chunked"
    for answer in answers:
        assert answer.status_code == 201, answer.text[:500]
        created = answer.json()
        assert (created["size"], created["sha256"]) == (TEN_MB, hashlib.sha256(data).hexdigest())
        fetched = requests.get(created["url"], headers=headers, timeout=60)
        assert fetched.status_code == 200 and fetched.content == data
        assert fetched.headers["Content-Type"] == "application/octet-stream"
        assert fetched.headers["Content-Disposition"] == 'attachment; filename="big.bin"'
        assert fetched.headers["X-Content-Type-Options"] == "nosniff"


def test_one_byte_over_10_mb_is_413_in_either_envelope_and_leaves_no_file_and_no_row(live, headers):
    before_rows, before_files = _uploads(live, headers), stored_files(live.data_dir / "media")
    data = _file(TEN_MB + 1)

    answers = [
        requests.post(f"{live.base_url}/api/upload", files={"file": ("big.bin", data)}, headers=headers, timeout=60),
        requests.post(f"{live.base_url}/api/upload", headers=headers, timeout=60,
                      json={"filename": "big.bin", "content_base64": base64.b64encode(data).decode()}),
    ]

    for answer in answers:
        assert answer.status_code == 413, answer.text[:500]
        assert answer.json()["error"]["code"] == "payload_too_large"
        assert answer.json()["error"]["details"] == {"size": TEN_MB + 1, "max_bytes": TEN_MB}
    assert _uploads(live, headers) == before_rows
    assert stored_files(live.data_dir / "media") == before_files


def test_every_other_path_keeps_the_10_mb_body_limit(live, headers):
    eleven_mb = b" " * (11 * 1024 * 1024)
    for path in ("/api/sessions", "/api/kb/documents", "/v1/chat/completions", "/api/uploads"):
        answer = requests.post(f"{live.base_url}{path}", data=eleven_mb, timeout=60,
                               headers={**headers, "Content-Type": "application/json"})
        assert answer.status_code == 413, f"{path}: {answer.status_code} {answer.text[:200]}"
    kb = requests.post(f"{live.base_url}/api/kb/documents", files={"file": ("big.txt", b"a" * 11 * 1024 * 1024)},
                       headers=headers, timeout=60)
    assert kb.status_code == 413


def _raw_answer(live, head: bytes, first_piece: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", live.port), timeout=5) as sock:
        sock.sendall(head + first_piece)
        answer, deadline = b"", time.monotonic() + 5
        while b"\r\n\r\n" not in answer and time.monotonic() < deadline:
            data = sock.recv(65536)
            if not data:
                break
            answer += data
        return answer


def test_a_body_past_the_upload_paths_own_limit_is_refused_before_it_is_sent(live, headers):
    head = (f"POST /api/upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Authorization: {headers['Authorization']}\r\nContent-Length: {15 * 1024 * 1024}\r\n\r\n").encode()

    answer = _raw_answer(live, head, b"{" * 1024)

    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    assert b"payload_too_large" in answer


def test_the_upload_paths_limit_holds_however_the_path_is_spelled(live, headers):
    data = _file(9 * 1024 * 1024)  # 12 MB in base64: over the 10 MB of other paths, within the upload path's

    body = json.dumps({"filename": "nine.bin", "content_base64": base64.b64encode(data).decode()}).encode()
    # http.client sends the path as written (requests would turn %75 back into "u").
    connection = http.client.HTTPConnection("127.0.0.1", live.port, timeout=60)
    connection.request("POST", "/api/%75pload", body=body, headers={**headers, "Content-Type": "application/json"})
    answer = connection.getresponse()

    assert answer.status == 201, answer.read()[:300]
    assert json.loads(answer.read())["size"] == len(data)
    connection.close()


def test_stored_files_are_readable_by_the_server_user_only(live, headers):
    created = requests.post(f"{live.base_url}/api/upload", files={"file": ("a.txt", b"private words\n")},
                            headers=headers, timeout=10).json()

    [path] = [path for path in stored_files(live.data_dir / "media") if path.name == created["id"].replace("-", "")]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for directory in (path.parent, path.parent.parent, live.data_dir / "media"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory

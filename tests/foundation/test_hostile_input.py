"""Hostile bodies over real HTTP against daphne: deep JSON, chunked bodies, requests daphne refuses itself."""

import socket
import time

import pytest
import requests

pytestmark = pytest.mark.e2e  # every test here starts a process

SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "X-XSS-Protection": "1; mode=block",
    "Referrer-Policy": "same-origin",
}
DEEP = b'{"a": ' * 1000 + b"1" + b"}" * 1000
DEEP_LIST = b"[" * 1000 + b"]" * 1000


@pytest.fixture(scope="module")
def session_id(server, admin_headers):
    response = requests.post(server.base_url + "/api/sessions", json={"name": "target"}, headers=admin_headers,
                             timeout=10)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def _json_routes(server) -> list[tuple[str, str]]:
    """Every operation the schema says takes a JSON body (docs/api.md's 18 JSON routes, and any added later)."""
    paths = requests.get(server.base_url + "/api/schema?format=json", timeout=10).json()["paths"]
    return [(method.upper(), path) for path, operations in paths.items() for method, operation in operations.items()
            if "application/json" in operation.get("requestBody", {}).get("content", {})]


def _assert_security_headers(response: requests.Response) -> None:
    for name, value in SECURITY_HEADERS.items():
        assert response.headers.get(name) == value, f"{name} on {response.status_code} {response.url}"


def _chunks(data: bytes):
    for start in range(0, len(data), 7):
        yield data[start:start + 7]


def test_json_nested_a_thousand_levels_is_a_400_on_every_json_route(server, admin_headers, session_id):
    routes = _json_routes(server)
    assert len(routes) >= 18, routes
    for method, path in routes:
        for body in (DEEP, DEEP_LIST):
            response = requests.request(method, server.base_url + path.replace("{id}", session_id), data=body,
                                        headers={**admin_headers, "Content-Type": "application/json"}, timeout=10)
            assert response.status_code == 400, f"{method} {path}: {response.status_code} {response.text[:300]}"
            error = response.json()["error"]
            if path.startswith("/oauth/"):  # OAuth's own shape there: {error: code, error_description}
                assert isinstance(error, str) and error.startswith("invalid_"), response.json()
                assert isinstance(response.json()["error_description"], str)
                continue
            if path.startswith("/v1/messages"):  # Anthropic's shape there: {"type": "error", "error": {type, message}}
                assert response.json()["type"] == "error" and error["type"] == "invalid_request_error", error
                continue
            assert error["code"] == "invalid", f"{method} {path}: {error}"
            if path.startswith("/v1"):
                assert error["type"] == "invalid_request_error"
            else:
                assert isinstance(error["details"], dict)


def test_json_nested_a_thousand_levels_is_a_400_without_a_token_too(server):
    for path in ("/api/auth/login", "/api/auth/register", "/v1/chat/completions"):
        response = requests.post(server.base_url + path, data=DEEP, headers={"Content-Type": "application/json"},
                                 timeout=10)
        assert response.status_code == 400, f"{path}: {response.text[:300]}"
        assert response.json()["error"]["code"] == "invalid"


def test_json_nested_a_hundred_levels_is_still_read(server):
    body = b'{"model": "hash-256", "input": "hello", "extra": ' + b"[" * 98 + b"]" * 98 + b"}"
    response = requests.post(server.base_url + "/v1/embeddings", data=body,
                             headers={"Content-Type": "application/json"}, timeout=10)
    assert response.status_code == 200, response.text[:300]


def test_brackets_inside_strings_do_not_count_as_nesting(server, admin_headers):
    name = '[{"\\"' * 200
    response = requests.post(server.base_url + "/api/sessions", json={"name": name[:200]}, headers=admin_headers,
                             timeout=10)
    assert response.status_code == 201, response.text
    assert response.json()["name"] == name[:200]


def test_a_chunked_body_creates_the_session_it_names(server, admin_headers):
    response = requests.post(server.base_url + "/api/sessions", data=_chunks(b'{"name": "sent chunked"}'),
                             headers={**admin_headers, "Content-Type": "application/json"}, timeout=10)
    assert response.request.headers.get("Transfer-Encoding") == "chunked"
    assert response.status_code == 201, response.text
    assert response.json()["name"] == "sent chunked"


def test_a_chunked_config_patch_changes_the_config(server, admin_headers):
    before = requests.get(server.base_url + "/api/config", headers=admin_headers, timeout=10).json()
    wanted = 0.25 if before.get("temperature") != 0.25 else 0.5
    response = requests.patch(server.base_url + "/api/config", data=_chunks(b'{"temperature": %r}' % wanted),
                              headers={**admin_headers, "Content-Type": "application/json"}, timeout=10)
    assert response.status_code == 200, response.text
    after = requests.get(server.base_url + "/api/config", headers=admin_headers, timeout=10).json()
    assert after["temperature"] == wanted


def test_a_chunked_body_reaches_a_v1_view(server):
    response = requests.post(server.base_url + "/v1/embeddings", data=_chunks(b'{"input": ["a", "b"]}'),
                             headers={"Content-Type": "application/json"}, timeout=10)
    assert response.status_code == 400, response.text  # "model" is required: the body was read
    assert response.json()["error"]["param"] == "model"
    response = requests.post(server.base_url + "/v1/embeddings",
                             data=_chunks(b'{"model": "hash-256", "input": ["a", "b"]}'),
                             headers={"Content-Type": "application/json"}, timeout=10)
    assert response.status_code == 200, response.text
    assert len(response.json()["data"]) == 2


def test_a_multipart_body_without_a_boundary_is_a_400_envelope_with_security_headers(server, admin_headers):
    response = requests.post(server.base_url + "/api/kb/documents", data=b"--x\r\n\r\nhello\r\n--x--\r\n",
                             headers={**admin_headers, "Content-Type": "multipart/form-data"}, timeout=10)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid"
    _assert_security_headers(response)


def _raw(server, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(request)
        answer = b""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            data = sock.recv(65536)
            if not data:
                break
            answer += data
        return answer


_WEBSOCKET = b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"


@pytest.mark.parametrize("request_bytes", [
    b"GET /api/h\xc3\xa9alth HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",  # daphne: bad path
    b"GET /api/health?q=\xff HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",  # daphne: bad query
    b"NONSENSE\r\n\r\n",  # Twisted: no request line
    b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n",  # Twisted: no colon
    _WEBSOCKET + b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",  # no app
    _WEBSOCKET + b"\r\n",  # autobahn: no Sec-WebSocket-Key
])
def test_requests_the_http_server_refuses_itself_still_carry_the_security_headers(server, request_bytes):
    answer = _raw(server, request_bytes)
    head = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    assert head.startswith(("HTTP/1.1 4", "HTTP/1.1 5")), head
    lines = {line.split(":", 1)[0].strip().lower(): line.split(":", 1)[1].strip()
             for line in head.split("\r\n")[1:] if ":" in line}
    for name, value in SECURITY_HEADERS.items():
        assert lines.get(name.lower()) == value, f"{name} missing from {head!r}"

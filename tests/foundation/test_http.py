"""Rules about HTTP, checked over real HTTP against a real server process."""

import re

import pytest
import requests

from tests.server import LiveServer

pytestmark = pytest.mark.e2e  # every test here starts a process

SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "X-XSS-Protection": "1; mode=block",
    "Referrer-Policy": "same-origin",
}
ELEVEN_MB = 11 * 1024 * 1024


def _assert_security_headers(response: requests.Response) -> None:
    for name, value in SECURITY_HEADERS.items():
        assert response.headers.get(name) == value, f"{name} on {response.request.method} {response.url}"


def _assert_envelope(response: requests.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert isinstance(body["error"]["details"], dict)


def test_health_answers_ok(server):
    response = requests.get(f"{server.base_url}/api/health", timeout=5)
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok" and body["database"] == "ok" and body["version"] == "1.0.0"
    assert body["uptime_s"] >= 0
    _assert_security_headers(response)


@pytest.mark.parametrize(("method", "path", "status", "code"), [
    ("GET", "/api/no-such-thing", 404, "not_found"),
    ("GET", "/api/auth/me", 401, "not_authenticated"),
    ("GET", "/api/auth/login", 405, "method_not_allowed"),
    ("DELETE", "/api/health", 405, "method_not_allowed"),
])
def test_api_errors_use_the_envelope_and_carry_security_headers(server, method, path, status, code):
    response = requests.request(method, f"{server.base_url}{path}", timeout=5)
    _assert_envelope(response, status, code)
    _assert_security_headers(response)


def test_a_malformed_json_body_is_a_400_envelope(server):
    response = requests.post(f"{server.base_url}/api/auth/login", data="{nope", timeout=5,
                             headers={"Content-Type": "application/json"})
    _assert_envelope(response, 400, "invalid")


def test_pages_outside_the_api_carry_security_headers_too(server):
    for path in ("/not-here", "/admin/login/"):
        response = requests.get(f"{server.base_url}{path}", timeout=5)
        _assert_security_headers(response)
    assert requests.get(f"{server.base_url}/admin/login/", timeout=5).status_code == 200


def test_a_body_over_10mb_with_content_length_is_413(server):
    response = requests.post(f"{server.base_url}/api/auth/login", data=b"x" * ELEVEN_MB, timeout=30,
                             headers={"Content-Type": "application/json"})
    _assert_envelope(response, 413, "payload_too_large")
    _assert_security_headers(response)


def test_a_chunked_body_over_10mb_is_413(server):
    def chunks():
        for _ in range(11 * 16):
            yield b"y" * 65536

    response = requests.post(f"{server.base_url}/api/auth/login", data=chunks(), timeout=30,
                             headers={"Content-Type": "application/json"})
    assert response.request.headers.get("Transfer-Encoding") == "chunked"
    _assert_envelope(response, 413, "payload_too_large")


def test_a_body_just_under_the_limit_is_read(server):
    response = requests.post(f"{server.base_url}/api/auth/login", data=b" " * (10 * 1024 * 1024 - 10) + b"{}",
                             timeout=30, headers={"Content-Type": "application/json"})
    _assert_envelope(response, 400, "invalid")


@pytest.mark.parametrize("origin", ["http://localhost:5173", "http://127.0.0.1:3000", "https://localhost"])
def test_cors_preflight_from_a_local_origin_is_allowed_with_put(server, origin):
    response = requests.options(f"{server.base_url}/api/config", timeout=5, headers={
        "Origin": origin, "Access-Control-Request-Method": "PUT",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert response.status_code == 200
    assert response.headers["Access-Control-Allow-Origin"] == origin
    methods = {m.strip() for m in response.headers["Access-Control-Allow-Methods"].split(",")}
    assert {"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} <= methods
    headers = {h.strip().lower() for h in response.headers["Access-Control-Allow-Headers"].split(",")}
    assert {"authorization", "content-type"} <= headers


@pytest.mark.parametrize("origin", ["http://evil.example", "http://localhost.evil.example", "http://127.0.0.1.nip.io"])
def test_cors_from_another_origin_gets_no_cors_headers(server, origin):
    preflight = requests.options(f"{server.base_url}/api/config", timeout=5, headers={
        "Origin": origin, "Access-Control-Request-Method": "PUT"})
    assert "Access-Control-Allow-Origin" not in preflight.headers
    simple = requests.get(f"{server.base_url}/api/health", headers={"Origin": origin}, timeout=5)
    assert "Access-Control-Allow-Origin" not in simple.headers


def test_schema_and_offline_docs_are_served(server):
    schema = requests.get(f"{server.base_url}/api/schema?format=json", timeout=10)
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    for path in ("/api/auth/login", "/api/auth/register", "/api/config", "/api/health"):
        assert path in paths
    docs = requests.get(f"{server.base_url}/api/docs", timeout=10)
    assert docs.status_code == 200
    scripts = re.findall(r'src="([^"]+\.js)"', docs.text)
    assert scripts, "the docs page loads no script"
    for src in scripts:
        assert src.startswith("/"), f"docs page loads {src} from another host"
        assert requests.get(f"{server.base_url}{src}", timeout=10).status_code == 200, src


def test_a_non_admin_cannot_write_config_over_http(server):
    user = requests.post(f"{server.base_url}/api/auth/register",
                         json={"username": "plainuser", "password": "a-long-fine-password"}, timeout=10).json()
    response = requests.patch(f"{server.base_url}/api/config", json={"temperature": 1.0}, timeout=5,
                              headers={"Authorization": f"Bearer {user['token']}"})
    _assert_envelope(response, 403, "forbidden")


def test_an_unknown_config_field_is_rejected_over_http(server):
    token = server.login()["token"]
    headers = {"Authorization": f"Bearer {token}"}
    before = requests.get(f"{server.base_url}/api/config", headers=headers, timeout=5).json()
    response = requests.put(f"{server.base_url}/api/config", json={"model": "x", "nope": True}, headers=headers,
                            timeout=5)
    _assert_envelope(response, 400, "unknown_field")
    assert response.json()["error"]["details"]["fields"] == ["nope"]
    assert requests.get(f"{server.base_url}/api/config", headers=headers, timeout=5).json() == before


def test_the_admin_site_shows_users_and_the_config(server):
    session = requests.Session()
    page = session.get(f"{server.base_url}/admin/login/", timeout=5)
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    response = session.post(f"{server.base_url}/admin/login/?next=/admin/", timeout=10, data={
        "csrfmiddlewaretoken": csrf, "username": "admin", "password": server.admin_password, "next": "/admin/"},
        headers={"Referer": f"{server.base_url}/admin/login/"})
    assert response.status_code == 200 and "Log out" in response.text
    assert session.get(f"{server.base_url}/admin/auth/user/", timeout=5).status_code == 200
    config_page = session.get(f"{server.base_url}/admin/catalogue/agentconfig/", timeout=5)
    assert config_page.status_code == 200


@pytest.fixture
def limited_server():
    server = LiveServer(command="daphne").start()
    yield server
    server.stop()


def test_the_eleventh_login_in_a_minute_is_429_and_x_forwarded_for_does_not_dodge_it(limited_server):
    url = f"{limited_server.base_url}/api/auth/login"
    for attempt in range(10):
        response = requests.post(url, json={"username": "admin", "password": "wrong"}, timeout=5,
                                 headers={"X-Forwarded-For": f"10.0.0.{attempt}"})
        assert response.status_code == 401, f"attempt {attempt + 1}: {response.status_code}"
    response = requests.post(url, json={"username": "admin", "password": limited_server.admin_password}, timeout=5,
                             headers={"X-Forwarded-For": "10.9.9.9"})
    _assert_envelope(response, 429, "rate_limited")
    assert 1 <= int(response.headers["Retry-After"]) <= 61
    _assert_security_headers(response)


@pytest.fixture
def proxied_server():
    server = LiveServer(command="daphne", env={"AGENTSITE_TRUSTED_PROXIES": "1"}).start()
    yield server
    server.stop()


def test_behind_a_trusted_proxy_the_forwarded_client_is_counted(proxied_server):
    url = f"{proxied_server.base_url}/api/auth/login"
    for _ in range(11):
        last = requests.post(url, json={"username": "a", "password": "b"}, headers={"X-Forwarded-For": "10.1.1.1"},
                             timeout=5)
    assert last.status_code == 429
    other = requests.post(url, json={"username": "a", "password": "b"}, headers={"X-Forwarded-For": "10.2.2.2"},
                          timeout=5)
    assert other.status_code == 401


def test_a_refresh_token_rotates_once_even_under_concurrent_requests(server):
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    refresh = server.login()["refresh"]
    barrier = Barrier(8)

    def rotate(_):
        barrier.wait()
        return requests.post(f"{server.base_url}/api/auth/refresh", json={"refresh": refresh}, timeout=15).status_code

    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(rotate, range(8)))
    assert statuses.count(200) == 1, statuses
    assert set(statuses) == {200, 401}


@pytest.mark.parametrize("path", ["/api/sessions", "/api/config"])
def test_a_form_body_is_refused_as_415_not_a_500(server, path):
    token = server.login()["token"]
    form = "&".join(f"f{i}=1" for i in range(1100))
    response = requests.post(f"{server.base_url}{path}", data=form, timeout=10, headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/x-www-form-urlencoded"})
    assert response.status_code in (405, 415), response.text
    if response.status_code == 415:
        _assert_envelope(response, 415, "unsupported_media_type")


def test_the_admin_login_form_shares_the_login_rate_limit(limited_server):
    session = requests.Session()
    url = f"{limited_server.base_url}/admin/login/"
    statuses = []
    for _ in range(11):
        page = session.get(url, timeout=5)
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        statuses.append(session.post(url, timeout=5, headers={"Referer": url}, data={
            "csrfmiddlewaretoken": csrf, "username": "admin", "password": "wrong-guess"}).status_code)
    assert statuses[:10] == [200] * 10
    assert statuses[10] == 429
    api = requests.post(f"{limited_server.base_url}/api/auth/login", timeout=5,
                        json={"username": "admin", "password": limited_server.admin_password})
    assert api.status_code == 429


def _raw_request(server, head: bytes, body_pieces, read_timeout: float = 3.0) -> bytes:
    """Send a request piece by piece on a raw socket and return what the server answered so far."""
    import socket
    import time as _time

    with socket.create_connection(("127.0.0.1", server.port), timeout=read_timeout) as sock:
        sock.sendall(head)
        for piece in body_pieces:
            sock.sendall(piece)
        deadline = _time.monotonic() + read_timeout
        answer = b""
        while _time.monotonic() < deadline and b"\r\n\r\n" not in answer:
            try:
                data = sock.recv(65536)
            except TimeoutError:
                break
            if not data:
                break
            answer += data
        return answer


def test_a_huge_declared_body_is_refused_before_it_is_sent(server):
    head = (b"POST /api/auth/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 524288000\r\n\r\n")
    answer = _raw_request(server, head, [b"{" * 1024])
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b'"payload_too_large"' in answer or b"payload_too_large" in answer


def test_an_endless_chunked_body_is_refused_while_it_arrives(server):
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    megabyte = b"%x\r\n" % (1024 * 1024) + b"z" * (1024 * 1024) + b"\r\n"
    answer = _raw_request(server, head, [megabyte] * 11)  # no final chunk: the upload never ends
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"invalid_request_error" in answer  # /v1 answers in the OpenAI shape


def test_the_admin_login_form_still_requires_its_csrf_token(server):
    response = requests.post(f"{server.base_url}/admin/login/", timeout=5,
                             data={"username": "admin", "password": server.admin_password})
    assert response.status_code == 403
    assert "CSRF" in response.text


def test_api_responses_set_no_session_or_csrf_cookies(server):
    token = server.login()["token"]
    response = requests.get(f"{server.base_url}/api/auth/me", headers={"Authorization": f"Bearer {token}"},
                            timeout=5)
    assert response.status_code == 200
    assert not response.cookies

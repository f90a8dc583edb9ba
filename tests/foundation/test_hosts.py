"""The Host check (docs/api.md, Conventions: Hosts): one rule at the ASGI layer for every path, over real HTTP."""

import pytest
import requests
from django.test import override_settings

from agentsite.core.hosts import host_allowed

SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "X-XSS-Protection": "1; mode=block",
    "Referrer-Policy": "same-origin",
}
CHAT = {"model": "agent", "messages": [{"role": "user", "content": "hi"}]}


def _send(server, method: str, path: str, host: str, headers: dict | None = None, **kwargs) -> requests.Response:
    return requests.request(method, server.base_url + path, timeout=10,
                            headers={**(headers or {}), "Host": host}, **kwargs)


def _assert_security_headers(response: requests.Response) -> None:
    for name, value in SECURITY_HEADERS.items():
        assert response.headers.get(name) == value, name


@pytest.mark.e2e
@pytest.mark.parametrize(("method", "path", "body"), [
    ("GET", "/v1/models", None),
    ("POST", "/v1/chat/completions", CHAT),
])
def test_a_foreign_host_is_refused_on_v1_in_the_openai_shape(server, method, path, body):
    response = _send(server, method, path, "evil.example", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_host"
    assert error["type"] == "invalid_request_error"
    _assert_security_headers(response)


@pytest.mark.e2e
@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/api/auth/register", {"username": "rebound", "password": "correct-horse-battery-9"}),
    ("GET", "/api/health", None),
    ("GET", "/admin/login/", None),
])
def test_a_foreign_host_is_refused_on_public_paths_in_the_api_envelope(server, method, path, body):
    response = _send(server, method, path, "evil.example:8000", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_host"
    assert response.json()["error"]["details"] == {}
    _assert_security_headers(response)


@pytest.mark.e2e
def test_a_registration_through_a_foreign_host_creates_no_user(server, admin_headers):
    _send(server, "POST", "/api/auth/register", "evil.example",
          json={"username": "rebound2", "password": "correct-horse-battery-9"})
    login = requests.post(server.base_url + "/api/auth/login", timeout=10,
                          json={"username": "rebound2", "password": "correct-horse-battery-9"})
    assert login.status_code == 401, login.text


@pytest.mark.e2e
def test_a_foreign_host_is_refused_before_the_token_is_checked(server, admin_headers):
    for headers in (admin_headers, {"Authorization": "Bearer not-a-token"}, {}):
        response = _send(server, "GET", "/api/sessions", "evil.example", headers)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == "invalid_host"


@pytest.mark.e2e
def test_a_foreign_host_is_refused_on_the_mounted_mcp_app_even_for_a_preflight(server, admin_headers):
    response = _send(server, "POST", "/mcp", "evil.example", admin_headers, json={"jsonrpc": "2.0"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_host"
    _assert_security_headers(response)
    preflight = _send(server, "OPTIONS", "/mcp", "evil.example", {
        "Origin": "http://localhost:5173", "Access-Control-Request-Method": "POST"})
    assert preflight.status_code == 400
    assert preflight.json()["error"]["code"] == "invalid_host"


@pytest.mark.e2e
@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "LOCALHOST:8000", "[::1]:9"])
def test_an_allowed_host_is_served(server, admin_headers, host):
    assert _send(server, "GET", "/v1/models", host).status_code == 200
    assert _send(server, "GET", "/api/sessions", host, admin_headers).status_code == 200


@pytest.mark.e2e
@pytest.mark.parametrize("host", ["localhost.evil.example", "127.0.0.1.nip.io", "localhost:notaport", "", "a b"])
def test_a_host_that_only_looks_allowed_is_refused(server, host):
    response = _send(server, "GET", "/api/health", host)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_host"


@override_settings(ALLOWED_HOSTS=[".example.com", "api.test"])
def test_the_shared_check_follows_djangos_matching_rules():
    assert host_allowed("example.com")
    assert host_allowed("sub.example.com:8443")
    assert host_allowed("API.TEST")
    assert host_allowed("api.test.")
    assert not host_allowed("example.com.evil.example")
    assert not host_allowed("localhost")
    assert not host_allowed(None)
    assert not host_allowed("")

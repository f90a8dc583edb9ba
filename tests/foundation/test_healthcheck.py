"""The container's health check (agentsite/server/healthcheck.py), against real HTTP servers on loopback."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator

import pytest

from agentsite.server.healthcheck import check, host_header, main


@pytest.mark.parametrize(("allowed", "host"), [
    (None, "localhost"), ("", "localhost"), ("*", "localhost"), (".example.com,*", "localhost"),
    ("agents.example.com", "agents.example.com"),
    ("*, .example.com, agents.example.com,localhost", "agents.example.com"),
    (" localhost ,127.0.0.1", "localhost")])
def test_the_host_sent_is_the_first_plain_allowed_name(allowed, host):
    assert host_header(allowed) == host


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200
    hosts: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        type(self).hosts.append(self.headers["Host"])
        self.send_response(self.status if self.path == "/api/health" else 404)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[tuple[str, type[_Health]]]:
    handler = type("Handler", (_Health,), {"hosts": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/api/health", handler
    finally:
        server.shutdown()
        server.server_close()


def test_a_200_is_healthy_and_the_request_carries_an_allowed_host(health_server, monkeypatch):
    url, handler = health_server
    monkeypatch.setenv("AGENTSITE_ALLOWED_HOSTS", "agents.example.com,localhost")

    assert check(url) == (True, f"{url}: 200")
    assert main([url]) == 0
    assert handler.hosts == ["agents.example.com", "agents.example.com"]


@pytest.mark.parametrize("status", [503, 500, 400, 301])
def test_any_other_answer_is_unhealthy_and_says_what_came(health_server, status, capsys):
    url, handler = health_server
    handler.status = status

    assert check(url) == (False, f"{url}: {status}")
    assert main([url]) == 1
    assert f"unhealthy: {url}: {status}" in capsys.readouterr().err


def test_nothing_listening_is_unhealthy():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    healthy, seen = check(f"http://127.0.0.1:{port}/api/health")
    assert not healthy and "refused" in seen.lower()

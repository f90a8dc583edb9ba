"""The test harness's live servers (tests/server.py): a server holds its port from the moment it is chosen,
and a process that answers on that port is never taken for the server."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from tests.server import LiveServer, listening_socket, refusing_port


class _Healthy(BaseHTTPRequestHandler):
    """A decoy: answers every GET as a healthy agentsite would."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = b'{"status": "ok"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def decoy() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Healthy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@pytest.mark.e2e
def test_a_live_servers_port_cannot_be_taken_between_its_choice_and_its_stop():
    server = LiveServer(command="daphne", data_dir=None)
    port = server.port  # chosen: from here on, it is this server's
    try:
        assert not _bindable(port), "another process could take the port before the server starts"
    finally:
        server.stop()
    assert _bindable(port), "stop() gives the port back"


@pytest.mark.e2e
def test_a_process_answering_on_the_port_is_never_taken_for_the_server(decoy):
    assert requests.get(f"http://127.0.0.1:{decoy}/api/health", timeout=5).status_code == 200
    server = LiveServer(command="daphne", port=decoy)
    try:
        with pytest.raises(RuntimeError, match=f"127.0.0.1:{decoy}"):
            server.start()
    finally:
        server.stop()


@pytest.mark.e2e
def test_a_server_answers_only_once_its_own_socket_is_the_ports_one_listener():
    server = LiveServer(command="daphne").start()
    try:
        server.assert_ours()
        assert requests.get(f"{server.base_url}/api/health", timeout=5).status_code == 200
        server.proc.kill()
        server.proc.wait()
        with pytest.raises(RuntimeError, match="not running"):
            server.assert_ours()
    finally:
        server.stop()


def test_a_held_socket_and_the_refusing_port_are_exclusive():
    held = listening_socket()
    try:
        port = held.getsockname()[1]
        with pytest.raises(RuntimeError, match="another process holds it"):
            listening_socket(port)
    finally:
        held.close()
    closed = refusing_port()
    assert refusing_port() == closed  # one for the whole run
    assert not _bindable(closed)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", closed), timeout=5).close()

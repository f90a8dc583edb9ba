"""Clients that hang up at any moment of a chat turn, against a live `serve`: every stored reply ends final.

Half the clients hang up before any byte of the response, after a delay that varies from one to the next
(while the request is read, checked, or the turn's opening write runs on its database thread); the others
read the stream's `start` and a few deltas first. Before a turn belonged to the task that started it, a
hang-up during the opening write left its reply `streaming` until the process died.
"""

from __future__ import annotations

import json
import socket
import time

import pytest
import requests

from tests.e2e import UPSTREAM_KEY, in_parallel, poll, read_then_hang_up
from tests.fakes.llm import Text
from tests.server import LiveServer

pytestmark = pytest.mark.e2e

CLIENTS = 50
SLOW_REPLY = Text("word " * 200, pieces=["word "] * 200, delay=0.05)  # ten seconds if nobody hangs up
SETTLE_S = 10.0  # on a loaded 2-core machine; unloaded, every reply is final well within a second


@pytest.fixture(scope="module")
def chat_server(fake_openai_server):
    server = LiveServer(env={"AGENTSITE_LOGIN_RATE_LIMIT": "1000"}).start()
    headers = {"Authorization": f"Bearer {server.login()['token']}"}
    requests.patch(f"{server.base_url}/api/config", headers=headers, timeout=10, json={
        "provider": "openai", "base_url": fake_openai_server.base_url, "api_key": UPSTREAM_KEY,
        "model": "fake-model", "kb_enabled": False}).raise_for_status()
    yield server, headers
    server.stop()


def hang_up_before_the_response(server: LiveServer, headers: dict[str, str], session_id: str, after_s: float) -> None:
    """Send the chat request, then close the connection after `after_s` or at the response's first byte."""
    body = json.dumps({"message": "story"}).encode()
    request = (f"POST /api/sessions/{session_id}/chat HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
               f"Authorization: {headers['Authorization']}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(request)
        if after_s > 0:
            sock.settimeout(after_s)
            try:
                sock.recv(1)
            except TimeoutError:
                pass


def test_fifty_clients_hanging_up_at_varying_moments_leave_every_stored_reply_final(chat_server, fake_openai):
    server, headers = chat_server
    sessions = in_parallel(CLIENTS, lambda _: requests.post(f"{server.base_url}/api/sessions", json={},
                                                            headers=headers, timeout=30).json()["id"])
    fake_openai.script(*[SLOW_REPLY] * CLIENTS)

    def chat_and_leave(index: int) -> None:
        if index % 2 == 0:  # 0, 2, 4 ... 48 ms: before, during and after the opening write
            hang_up_before_the_response(server, headers, sessions[index], after_s=index / 1000)
            return
        response = requests.post(f"{server.base_url}/api/sessions/{sessions[index]}/chat",
                                 json={"message": "story"}, headers=headers, stream=True, timeout=60)
        assert response.status_code == 200, response.text
        events = 1 + index // 2 % 4  # `start`, then 0 to 3 deltas
        read_then_hang_up(response, deltas=events, is_delta=lambda name, _: name in ("start", "delta"))

    in_parallel(CLIENTS, chat_and_leave)
    left_at = time.monotonic()

    def messages(session_id: str) -> list[dict]:
        return requests.get(f"{server.base_url}/api/sessions/{session_id}/messages", headers=headers,
                            timeout=30).json()["results"]

    def unsettled() -> list[tuple[str, str]]:
        """(session, role:status) of every stored message not yet in its final state."""
        found = in_parallel(CLIENTS, lambda i: messages(sessions[i]))
        return [(session_id, f"{message['role']}:{message['status']}")
                for session_id, stored in zip(sessions, found, strict=True)
                for message in stored if message["status"] == "streaming"]

    still = []

    def all_final() -> bool:
        still[:] = unsettled()
        return not still

    try:
        poll(all_final, "every stored reply was final after the last hang-up", timeout=SETTLE_S)
    except AssertionError as failure:
        raise AssertionError(f"{failure}; still streaming: {still}") from None
    settled_in = time.monotonic() - left_at

    stored = in_parallel(CLIENTS, lambda i: messages(sessions[i]))
    roles = [[message["role"] for message in found] for found in stored]
    # A client that left before its turn was stored has no messages; one whose turn was stored has both.
    assert all(found in ([], ["user", "assistant"]) for found in roles), roles
    replies = [found[1] for found in stored if found]
    assert len(replies) >= CLIENTS // 2, "the clients that read the stream all had their turn stored"
    assert {reply["status"] for reply in replies} == {"interrupted"}
    print(f"{len(replies)} replies stored, all final {settled_in:.2f} s after the last hang-up")

"""The agents' directory across the workers of `serve --workers 2` (issue 45, items 1 and 4): each worker keeps
the agents' rules it read (a resolve costs no query), yet a change made through one worker (an agent shared, its
instructions changed, made private again) counts from the next request on every worker, over real HTTP, with the
fake upstream as the witness of the instructions each worker sends."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import requests

from tests.fakes.llm import Echo, FakeOpenAI
from tests.server import LiveServer

pytestmark = pytest.mark.e2e

WORKER = "x-agentsite-worker"
PASSWORD = "correct-horse-battery-9"


@pytest.fixture
def deployment() -> Iterator[tuple[LiveServer, FakeOpenAI, dict[str, str], str]]:
    """A server of two workers with a connection `local` (small) on the fake upstream; admin headers and a
    member's token."""
    upstream = FakeOpenAI(default_reply=Echo("echo: ")).start()
    server = LiveServer(workers=2, env={"AGENTSITE_WORKER_HEADER": "1", "AGENTSITE_LOGIN_RATE_LIMIT": "1000",
                                        "AGENTSITE_ALLOW_PRIVATE_FETCH": "1"}).start()
    try:
        admin = {"Authorization": f"Bearer {server.login()['token']}", "Connection": "close"}
        created = requests.post(f"{server.base_url}/api/connections", headers=admin, timeout=10, json={
            "name": "local", "provider": "openai", "base_url": upstream.base_url, "models": ["small"]})
        assert created.status_code == 201, created.text
        config = requests.patch(f"{server.base_url}/api/config", headers=admin, timeout=10, json={"kb_enabled": False})
        assert config.status_code == 200, config.text
        registered = requests.post(f"{server.base_url}/api/auth/register", timeout=10,
                                   json={"username": "member", "password": PASSWORD})
        assert registered.status_code == 201, registered.text
        yield server, upstream, admin, registered.json()["token"]
    finally:
        server.stop()
        upstream.stop()


def on_both_workers(server: LiveServer, upstream: FakeOpenAI, token: str, model: str) -> dict[str, tuple]:
    """What each worker answers a chat completion naming `model` with: (status, the first system message the
    upstream received for it, whether /v1/models lists it), until both have answered (a new connection each
    time, so either worker may take it); every answer of one worker must be the same."""
    seen: dict[str, tuple] = {}
    deadline = time.monotonic() + 30
    headers = {"Authorization": f"Bearer {token}", "Connection": "close"}
    while len(seen) < 2:
        assert time.monotonic() < deadline, f"only worker(s) {sorted(seen)} answered in 30 s"
        upstream.reset()
        response = requests.post(f"{server.base_url}/v1/chat/completions", timeout=30, headers=headers, json={
            "model": model, "messages": [{"role": "user", "content": "hi"}]})
        worker = response.headers[WORKER]
        system = None
        if response.status_code == 200:
            [body] = upstream.bodies()
            system = next(message["content"] for message in body["messages"] if message["role"] == "system")
        else:
            assert response.json()["error"]["code"] == "model_not_found", response.text
        models = requests.get(f"{server.base_url}/v1/models", timeout=30, headers=headers)
        listed = (models.headers[WORKER] == worker, model in {item["id"] for item in models.json()["data"]})
        answer = (response.status_code, system, listed[1] if listed[0] else None)
        kept = seen.setdefault(worker, answer)
        if kept[2] is None and answer[2] is not None:  # the listing was answered by the other worker before
            kept = seen[worker] = answer
        assert kept[:2] == answer[:2], (worker, kept, answer)
        assert answer[2] in (None, kept[2]), (worker, kept, answer)
    return seen


def test_a_change_through_one_worker_counts_from_the_next_request_on_every_worker(deployment):
    server, upstream, admin, token = deployment
    made = requests.post(f"{server.base_url}/api/agents", headers=admin, timeout=10, json={
        "slug": "desk", "name": "Desk", "instructions": "First words.", "model": "local/small"})
    assert made.status_code == 201, made.text
    agent = made.json()["id"]
    # Both workers read (and keep) the rules: a private agent of the admin's is no model of the member's.
    assert {answer[:2] for answer in on_both_workers(server, upstream, token, "agent:desk").values()} == {
        (404, None)}

    shared = requests.put(f"{server.base_url}/api/agents/{agent}/access", headers=admin, timeout=10,
                          json={"visibility": "everyone"})
    assert shared.status_code == 200, shared.text
    answers = on_both_workers(server, upstream, token, "agent:desk")
    assert {answer[:2] for answer in answers.values()} == {(200, "First words.")}
    assert {answer[2] for answer in answers.values()} <= {True, None}

    changed = requests.patch(f"{server.base_url}/api/agents/{agent}", headers=admin, timeout=10,
                             json={"instructions": "Second words."})
    assert changed.status_code == 200 and changed.json()["version"] == 2, changed.text
    assert {answer[:2] for answer in on_both_workers(server, upstream, token, "agent:desk").values()} == {
        (200, "Second words.")}
    assert {answer[:2] for answer in on_both_workers(server, upstream, token, "agent:desk@1").values()} == {
        (200, "First words.")}

    private = requests.put(f"{server.base_url}/api/agents/{agent}/access", headers=admin, timeout=10,
                           json={"visibility": "private"})
    assert private.status_code == 200, private.text
    answers = on_both_workers(server, upstream, token, "agent:desk")
    assert {answer[:2] for answer in answers.values()} == {(404, None)}
    assert {answer[2] for answer in answers.values()} <= {False, None}

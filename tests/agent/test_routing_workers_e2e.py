"""The fallback cool-down is shared by the workers of `serve --workers 2`: once one worker found an alias's first
target dead and fell back, the other skips it too (each worker names itself: AGENTSITE_WORKER_HEADER)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import requests

from tests.fakes.llm import Echo, FakeOpenAI
from tests.server import LiveServer, refusing_port

pytestmark = pytest.mark.e2e

WORKER = "x-agentsite-worker"
ATTEMPTS = "x-agentsite-attempts"


@pytest.fixture
def two_workers() -> Iterator[tuple[LiveServer, dict[str, str]]]:
    live = FakeOpenAI(default_reply=Echo("live: ")).start()
    server = LiveServer(workers=2, env={"AGENTSITE_WORKER_HEADER": "1", "AGENTSITE_UPSTREAM_COOLDOWN_S": "300",
                                        "AGENTSITE_LOGIN_RATE_LIMIT": "1000",
                                        "AGENTSITE_ALLOW_PRIVATE_FETCH": "1"}).start()
    try:
        headers = {"Authorization": f"Bearer {server.login()['token']}", "Connection": "close"}
        for body in ({"name": "dead", "provider": "openai", "base_url": f"http://127.0.0.1:{refusing_port()}/v1",
                      "models": ["gone"]},
                     {"name": "live", "provider": "openai", "base_url": live.base_url, "models": ["fake-model"]}):
            response = requests.post(f"{server.base_url}/api/connections", json=body, headers=headers, timeout=10)
            assert response.status_code == 201, response.text
        response = requests.post(f"{server.base_url}/api/aliases", headers=headers, timeout=10, json={
            "name": "smart", "strategy": "fallback", "targets": [{"model": "dead/gone"}, {"model": "live/fake-model"}]})
        assert response.status_code == 201, response.text
        yield server, headers
    finally:
        server.stop()
        live.stop()


def ask(server: LiveServer, headers: dict[str, str]) -> requests.Response:
    """One /v1 request on a new connection (Connection: close), so that either worker may take it."""
    response = requests.post(f"{server.base_url}/v1/chat/completions", headers=headers, timeout=30, json={
        "model": "smart", "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 200, response.text
    assert response.headers["x-agentsite-upstream"] == "live/fake-model"
    return response


def until_both_workers_answered(server: LiveServer, headers: dict[str, str]) -> None:
    """Both workers have served a request (each then listens for the others' announcements)."""
    seen: set[str] = set()
    deadline = time.monotonic() + 30
    while len(seen) < 2:
        assert time.monotonic() < deadline, f"only worker(s) {seen} answered in 30 s"
        response = requests.get(f"{server.base_url}/v1/models", headers=headers, timeout=10)
        assert response.status_code == 200, response.text
        seen.add(response.headers[WORKER])


def until_every_worker_sees_cooling(server: LiveServer, headers: dict[str, str], entry: str) -> None:
    """Both workers' GET /api/models show `entry` cooling."""
    cooling: set[str] = set()
    deadline = time.monotonic() + 30
    while len(cooling) < 2:
        assert time.monotonic() < deadline, f"only worker(s) {cooling} saw {entry} cooling in 30 s"
        response = requests.get(f"{server.base_url}/api/models", headers=headers, timeout=10)
        assert response.status_code == 200, response.text
        states = {model["name"]: model["state"] for model in response.json()["models"]}
        if states.get(entry) == "cooling":
            cooling.add(response.headers[WORKER])


def test_a_target_one_worker_saw_fail_is_skipped_by_the_other_worker(two_workers):
    server, headers = two_workers
    until_both_workers_answered(server, headers)

    first = ask(server, headers)
    assert first.headers[ATTEMPTS] == "dead/gone=failed(refused); live/fake-model=answered"
    # The announcement reaches the other worker asynchronously (pub/sub): wait until each worker's catalogue
    # says the dead target is cooling. The other worker never tried it, so only the announcement can say so.
    until_every_worker_sees_cooling(server, headers, "dead/gone")

    deadline = time.monotonic() + 30
    while True:
        assert time.monotonic() < deadline, f"no request reached the worker other than {first.headers[WORKER]}"
        later = ask(server, headers)
        assert ATTEMPTS not in later.headers, (later.headers[WORKER], later.headers[ATTEMPTS])
        if later.headers[WORKER] != first.headers[WORKER]:
            break

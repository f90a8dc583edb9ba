"""Model access across the workers of `serve --workers 2`: a group's `models` set or lifted through one worker
counts from the next request on every worker, although each keeps the memberships it read (AGENTSITE_AUTH_CACHE_S
long here: only the invalidation channel can make the other worker see the change), over real HTTP with the
openai SDK."""

from __future__ import annotations

import time
from collections.abc import Iterator

import openai
import pytest
import requests

from tests.fakes.llm import Echo, FakeOpenAI
from tests.server import LiveServer

pytestmark = pytest.mark.e2e

WORKER = "x-agentsite-worker"
PASSWORD = "correct-horse-battery-9"


@pytest.fixture
def deployment() -> Iterator[tuple[LiveServer, dict[str, str], str]]:
    """A server of two workers with a connection `local` (small, big) and the alias `fast` -> local/small;
    admin headers and a user's token."""
    upstream = FakeOpenAI(default_reply=Echo("echo: ")).start()
    server = LiveServer(workers=2, env={"AGENTSITE_WORKER_HEADER": "1", "AGENTSITE_AUTH_CACHE_S": "600",
                                        "AGENTSITE_LOGIN_RATE_LIMIT": "1000",
                                        "AGENTSITE_ALLOW_PRIVATE_FETCH": "1"}).start()
    try:
        admin = {"Authorization": f"Bearer {server.login()['token']}", "Connection": "close"}
        created = requests.post(f"{server.base_url}/api/connections", headers=admin, timeout=10, json={
            "name": "local", "provider": "openai", "base_url": upstream.base_url, "models": ["small", "big"]})
        assert created.status_code == 201, created.text
        alias = requests.post(f"{server.base_url}/api/aliases", headers=admin, timeout=10, json={
            "name": "fast", "strategy": "fallback", "targets": [{"model": "local/small"}]})
        assert alias.status_code == 201, alias.text
        registered = requests.post(f"{server.base_url}/api/auth/register", timeout=10,
                                   json={"username": "member", "password": PASSWORD})
        assert registered.status_code == 201, registered.text
        yield server, admin, registered.json()["token"]
    finally:
        server.stop()
        upstream.stop()


def answers_on_both_workers(server: LiveServer, token: str, model: str) -> dict[str, int]:
    """The status each worker answers a chat completion naming `model` with (a new connection each time, so
    either worker may take it), until both have answered; every answer of a worker must be the same."""
    seen: dict[str, int] = {}
    deadline = time.monotonic() + 30
    while len(seen) < 2:
        assert time.monotonic() < deadline, f"only worker(s) {sorted(seen)} answered in 30 s"
        response = requests.post(f"{server.base_url}/v1/chat/completions", timeout=30, json={
            "model": model, "messages": [{"role": "user", "content": "hi"}]},
            headers={"Authorization": f"Bearer {token}", "Connection": "close"})
        worker = response.headers[WORKER]
        assert seen.setdefault(worker, response.status_code) == response.status_code, (worker, response.text)
        if response.status_code == 403:
            assert response.json()["error"]["code"] == "model_not_allowed", response.text
    return seen


def test_a_restriction_set_and_lifted_counts_from_the_next_request_on_every_worker(deployment):
    server, admin, token = deployment
    me = requests.get(f"{server.base_url}/api/auth/me", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    user_id = int(me.json()["id"])  # a string in the user object
    # Both workers read (and keep) the user's memberships: none yet, every model allowed.
    assert set(answers_on_both_workers(server, token, "local/big").values()) == {200}

    group = requests.post(f"{server.base_url}/api/groups", headers=admin, timeout=10,
                          json={"name": "interns", "models": ["fast"]}).json()
    added = requests.post(f"{server.base_url}/api/groups/{group['id']}/members", headers=admin, timeout=10,
                          json={"user": user_id})
    assert added.status_code == 201, added.text
    assert set(answers_on_both_workers(server, token, "local/big").values()) == {403}
    assert set(answers_on_both_workers(server, token, "fast").values()) == {200}

    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=token, max_retries=0)
    with pytest.raises(openai.PermissionDeniedError) as refused:
        client.chat.completions.create(model="local/big", messages=[{"role": "user", "content": "hi"}])
    assert refused.value.code == "model_not_allowed"
    assert [model.id for model in client.models.list()] == ["fast"]

    lifted = requests.patch(f"{server.base_url}/api/groups/{group['id']}", headers=admin, timeout=10,
                            json={"models": None})
    assert lifted.status_code == 200 and lifted.json()["models"] is None
    assert set(answers_on_both_workers(server, token, "local/big").values()) == {200}
    reply = client.chat.completions.create(model="local/big", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content.startswith("echo: ")

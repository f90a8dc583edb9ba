"""Two processes of one deployment (PostgreSQL + Redis; the SQLite pass has no Redis by design): 100 mixed
requests spread over both are recorded exactly as the fake upstream counted them, and one budget holds across
both (issue 27, item 6)."""

from __future__ import annotations

import os
import random
import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
import requests

from tests.e2e import UPSTREAM_KEY, poll
from tests.fakes.llm import Text
from tests.server import LiveServer

pytestmark = pytest.mark.e2e

REDIS_URL = os.environ.get("REDIS_URL", "")


@pytest.fixture(scope="module")
def two_processes(fake_openai_server) -> Iterator[tuple[LiveServer, LiveServer, dict]]:
    if not REDIS_URL:  # the SQLite pass has no Redis by design; the PostgreSQL + Redis pass runs this
        pytest.skip("needs REDIS_URL: two processes share budgets through Redis")
    env = {"REDIS_URL": REDIS_URL, "AGENTSITE_CACHE_PREFIX": f"usage-{secrets.token_hex(4)}",
           "AGENTSITE_LOGIN_RATE_LIMIT": "1000", "AGENTSITE_USAGE_FLUSH_S": "0.3"}
    first = LiveServer(command="daphne", env=env).start()
    second = LiveServer(command="daphne", env=env, data_dir=str(first.data_dir), database_url=first.database_url,
                        migrated=False)
    try:
        second.start()
        admin = {"Authorization": f"Bearer {first.login()['token']}"}
        requests.patch(f"{first.base_url}/api/config", headers=admin, timeout=10, json={
            "provider": "openai", "base_url": fake_openai_server.base_url, "api_key": UPSTREAM_KEY,
            "model": "fake-model", "kb_enabled": False}).raise_for_status()
        yield first, second, admin
    finally:
        second.stop(drop_database=False)
        first.stop()


def _key(server: LiveServer, admin: dict, budget: dict | None = None) -> str:
    body = {"name": f"k-{secrets.token_hex(3)}", "scopes": ["v1"], **({"budget": budget} if budget else {})}
    response = requests.post(f"{server.base_url}/api/keys", json=body, headers=admin, timeout=10)
    assert response.status_code == 201, response.text
    return response.json()["key"]


def test_a_hundred_mixed_requests_over_two_processes_are_recorded_as_the_upstream_counted(two_processes,
                                                                                         fake_openai):
    first, second, admin = two_processes
    key = _key(first, admin)
    rng = random.Random(27)
    fake_openai.script(*[Text(f"reply {n}", usage=(rng.randint(1, 60), rng.randint(1, 40))) for n in range(100)])

    def one(n: int) -> None:
        server = (first, second)[n % 2]
        client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=key, max_retries=0)
        model = "agent" if n % 5 == 0 else "fake-model"
        if n % 3 == 0:
            chunks = list(client.chat.completions.create(model=model, stream=True,
                                                         messages=[{"role": "user", "content": f"q{n}"}]))
            assert chunks
        else:
            client.chat.completions.create(model=model, messages=[{"role": "user", "content": f"q{n}"}])

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(one, range(100)))
    prompt, completion = fake_openai.usage_total()
    assert len(fake_openai.usage_log) == 100

    def totals() -> dict:
        return requests.get(f"{second.base_url}/api/usage", params={"group_by": "facet"}, headers=admin,
                            timeout=10).json()["totals"]

    found = poll(lambda: (now := totals())["requests"] == 100 and now, "both processes flushed 100 calls")
    assert (found["prompt_tokens"], found["completion_tokens"]) == (prompt, completion)


def test_a_budget_holds_across_both_processes(two_processes, fake_openai):
    first, second, admin = two_processes
    key = _key(first, admin, {"tokens_per_day": 6})
    fake_openai.script(*[Text("ok", usage=(1, 1)) for _ in range(5)])
    statuses = []
    for n in range(5):
        server = (first, second)[n % 2]
        response = requests.post(f"{server.base_url}/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                                 timeout=10, json={"model": "fake-model", "max_tokens": 1,
                                                   "messages": [{"role": "user", "content": "x"}]})
        statuses.append(response.status_code)
    # Each reserves 1 token of prompt and max_tokens 1. 0, 2, 4 tokens used before the first three (alternately on
    # each process): 6, 4, then exactly 2 left; the fourth is refused wherever it lands.
    assert statuses == [200, 200, 200, 429, 429]
    assert len(fake_openai.bodies()) == 3

"""Usage and budgets on a real server (issue 27, items 3, 4 and 6): the openai SDK with a key meets its budget
as a RateLimitError at the right request, 50 parallel requests against 10 a minute let 10 through, and a
server killed with SIGKILL mid-load loses at most one flush interval of what the fake upstream counted."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import openai
import pytest
import requests

from tests.e2e import in_parallel, poll, server_with_fake_upstream
from tests.fakes.llm import Text
from tests.usage.gated import gated_stream

pytestmark = pytest.mark.e2e

PASSWORD = "a-long-enough-password-1"


@pytest.fixture(scope="module")
def live(fake_openai_server):
    server, headers = server_with_fake_upstream(fake_openai_server, AGENTSITE_USAGE_FLUSH_S="0.2")
    yield server, headers
    server.stop()


def _user_with_key(server, admin_headers, name: str, key_budget: dict | None = None) -> tuple[int, str, dict]:
    response = requests.post(f"{server.base_url}/api/auth/register", json={"username": name, "password": PASSWORD},
                             timeout=10)
    assert response.status_code == 201, response.text
    user_id = int(response.json()["user"]["id"])
    token_headers = {"Authorization": f"Bearer {response.json()['token']}"}
    body = {"name": "sdk", "scopes": ["v1", "api"], **({"budget": key_budget} if key_budget else {})}
    made = requests.post(f"{server.base_url}/api/keys", json=body, headers=token_headers, timeout=10)
    assert made.status_code == 201, made.text
    return user_id, made.json()["key"], token_headers


def _usage(server, headers, **query) -> dict:
    response = requests.get(f"{server.base_url}/api/usage", params=query, headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_users_daily_budget_ends_in_a_rate_limit_error_at_the_right_request(live, fake_openai):
    server, admin = live
    user_id, key, headers = _user_with_key(server, admin, "budgeted")
    put = requests.put(f"{server.base_url}/api/users/{user_id}/budget", json={"tokens_per_day": 46}, headers=admin,
                       timeout=10)
    assert put.status_code == 200 and put.json()["tokens_per_day"] == 46
    fake_openai.script(*[Text("fine", usage=(12, 7)) for _ in range(5)])
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=key, max_retries=0)
    # Each call reserves its worst case, 1 token of prompt and max_tokens 7: 8. 0, 19, 38 tokens used before
    # each: 46, 27, then exactly 8 left; the third fits and finishes (the upstream counts 19), the fourth is refused.
    for index in range(3):
        stream = index == 1
        reply = client.chat.completions.create(model="fake-model", stream=stream, max_tokens=7,
                                               messages=[{"role": "user", "content": "hi"}])
        text = "".join(chunk.choices[0].delta.content or "" for chunk in reply if chunk.choices) if stream else (
            reply.choices[0].message.content)
        assert text == "fine"
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model="fake-model", max_tokens=7, messages=[{"role": "user", "content": "hi"}])
    assert refused.value.code == "budget_exceeded" and refused.value.type == "rate_limit_error"
    assert 0 < int(refused.value.response.headers["Retry-After"]) <= 86400
    assert len(fake_openai.bodies()) == 3  # refused before the upstream was asked
    key_headers = {"Authorization": f"Bearer {key}"}
    left = requests.get(f"{server.base_url}/api/budget", headers=key_headers, timeout=10).json()
    assert left["user"]["tokens_per_day"]["used"] == 57 and left["user"]["tokens_per_day"]["remaining"] == 0
    report = poll(lambda: (found := _usage(server, headers, group_by="day,model"))["totals"]["requests"] == 3
                  and found, "the three calls flushed")
    assert report["totals"]["total_tokens"] == 57 and report["totals"]["prompt_tokens"] == 36
    [row] = report["results"]
    assert row["model"] == "default/fake-model" and row["day"] == datetime.now(UTC).date().isoformat()
    by_key = _usage(server, headers, group_by="key")["results"]
    assert [(row["key_name"], row["requests"]) for row in by_key] == [("sdk", 3)]
    # The user's own usage only; the admin sees theirs with ?user=
    assert _usage(server, admin, user=user_id)["totals"]["total_tokens"] == 57


def test_fifty_parallel_requests_against_ten_a_minute_let_ten_through(live, fake_openai):
    server, admin = live

    def burst(name: str) -> tuple[list[int], float, float]:
        """Fifty requests at once with a new key of 10 a minute: their statuses, and when the burst began and ended."""
        _, key, _ = _user_with_key(server, admin, name, key_budget={"requests_per_minute": 10})
        fake_openai.script(*[Text("ok", usage=(1, 1)) for _ in range(50)])

        def one(_: int) -> int:
            response = requests.post(f"{server.base_url}/v1/chat/completions", timeout=30, headers={
                "Authorization": f"Bearer {key}"}, json={"model": "fake-model", "messages": [{"role": "user",
                                                                                             "content": "x"}]})
            if response.status_code == 429:
                body = response.json()["error"]
                assert (body["type"], body["code"]) == ("rate_limit_error", "rate_limited")
                assert 0 < int(response.headers["Retry-After"]) <= 60
            return response.status_code

        began = time.time()
        statuses = in_parallel(50, one)
        return statuses, began, time.time()

    # The window is the UTC minute (the server's clock is this host's): a burst that spanned a minute boundary
    # met two windows, and is sent again with a new key, which begins just after that boundary and so cannot
    # span the next one (a burst takes seconds). No wait for the wall clock's minute.
    sent = len(fake_openai.bodies())
    statuses, began, ended = burst("burst")
    if began // 60 != ended // 60:
        sent = len(fake_openai.bodies())
        statuses, began, ended = burst("burst-again")
        assert began // 60 == ended // 60, f"the second burst ({ended - began:.1f} s) spanned a minute boundary too"
    assert statuses.count(200) == 10 and statuses.count(429) == 40, statuses
    assert len(fake_openai.bodies()) - sent == 10


def test_eight_concurrent_streams_against_a_hundred_tokens_a_day_spend_at_most_the_limit(live, fake_openai):
    """Issue 41's case on a real server: eight /v1 streams at once, each in flight (started, its usage not yet
    known) while the others are admitted. Each reserves 2 tokens of prompt and max_tokens 30: three fit in 100,
    the other five are refused before the upstream is asked (without reservations, all eight spent 8 x 32)."""
    server, admin = live
    user_id, key, _ = _user_with_key(server, admin, "concurrent")
    put = requests.put(f"{server.base_url}/api/users/{user_id}/budget", json={"tokens_per_day": 100}, headers=admin,
                       timeout=10)
    assert put.status_code == 200, put.text
    step = threading.Semaphore(0)
    fake_openai.script(*[gated_stream(step, (2, 30)) for _ in range(8)])
    refused = []

    def one(_: int) -> int:
        response = requests.post(f"{server.base_url}/v1/chat/completions", stream=True, timeout=30,
                                 headers={"Authorization": f"Bearer {key}"},
                                 json={"model": "fake-model", "stream": True, "max_tokens": 30,
                                       "messages": [{"role": "user", "content": "hello"}]})
        if response.status_code == 429:
            refused.append(response.json()["error"]["code"])
        body = b"".join(response.iter_content(None))
        assert response.status_code in (200, 429), body[:300]
        return response.status_code

    with ThreadPoolExecutor(max_workers=8) as pool:
        calls = [pool.submit(one, index) for index in range(8)]
        poll(lambda: len(fake_openai.bodies()) + len(refused) == 8, "every stream reached the upstream or was refused")
        for _ in range(8):
            step.release()
        statuses = sorted(call.result() for call in calls)
    assert statuses == [200] * 3 + [429] * 5 and set(refused) == {"budget_exceeded"}
    left = requests.get(f"{server.base_url}/api/budget", headers={"Authorization": f"Bearer {key}"},
                        timeout=10).json()["user"]["tokens_per_day"]
    assert (left["used"], left["remaining"]) == (96, 4)  # within the limit; nothing held once all ended


def test_a_sigkill_mid_load_loses_at_most_one_flush_interval(fake_openai):
    from tests.server import LiveServer

    interval = 0.5
    server, admin = server_with_fake_upstream(fake_openai, AGENTSITE_USAGE_FLUSH_S=str(interval))
    try:
        fake_openai.default_reply = Text("loaded", usage=(11, 5))
        stop = threading.Event()

        def load() -> None:
            while not stop.is_set():
                try:
                    requests.post(f"{server.base_url}/v1/chat/completions", headers=admin, timeout=10, json={
                        "model": "fake-model", "messages": [{"role": "user", "content": "go"}]})
                except requests.RequestException:
                    return  # the server is gone
        workers = [threading.Thread(target=load) for _ in range(4)]
        for worker in workers:
            worker.start()
        poll(lambda: len(fake_openai.usage_log) >= 60, "60 calls answered", timeout=60)
        os.killpg(server.proc.pid, signal.SIGKILL)
        killed_at = time.time()
        server.proc.wait()
        stop.set()
        for worker in workers:
            worker.join()
        served = list(fake_openai.usage_log)
        fake_openai.default_reply = None
        server.launch()
        server.wait_healthy()
        admin = {"Authorization": f"Bearer {server.login()['token']}"}
        recorded = _usage(server, admin)["totals"]
        served_tokens = sum(p + c for _, p, c in served)
        # What the killed process had not flushed: at most the calls of its last interval (plus the time the
        # kill took to land and a reply in flight to be recorded).
        last_interval = sum(p + c for at, p, c in served if at > killed_at - interval - 0.3)
        assert recorded["total_tokens"] <= served_tokens
        assert served_tokens - recorded["total_tokens"] <= last_interval, (served_tokens, recorded, last_interval)
        assert recorded["requests"] >= len(served) - sum(1 for at, _, _ in served if at > killed_at - interval - 0.3)
    finally:
        fake_openai.default_reply = None
        LiveServer.stop(server)

"""`serve --workers 2`: two daphne processes on one socket, as one server to its users.

One server for the module (each extra Django start costs seconds of CPU), on whatever the run configures: the
embedded default (SQLite, no Redis: the shared state goes through the database and the file cache under the
data directory) or PostgreSQL and Redis. Each answer names its process (AGENTSITE_WORKER_HEADER), so a test
can tell which worker served it. New connections every request (keep-alive would pin a client to a worker),
except where a test must reach each worker: it then holds a connection to each (tests.e2e.PinnedProcesses).
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
import requests

from tests.e2e import UPSTREAM_KEY, PinnedProcesses, poll, sse_events
from tests.fakes.llm import Hang
from tests.foundation.test_crash_recovery import children_with
from tests.server import LiveServer

pytestmark = pytest.mark.e2e

WORKERS = 2
HEADER = "X-Agentsite-Worker"


@pytest.fixture(scope="module")
def server(fake_openai_server):
    live = LiveServer(workers=WORKERS, env={
        "AGENTSITE_WORKER_HEADER": "1", "AGENTSITE_LOGIN_RATE_LIMIT": "10", "AGENTSITE_TRUSTED_PROXIES": "1",
        "AGENTSITE_PROCESS_SWEEP_S": "0.5", "AGENTSITE_PROCESS_HEARTBEAT_S": "0.3",
        "AGENTSITE_ALLOW_PRIVATE_FETCH": "1"})
    live.start()
    try:
        poll(lambda: len(daphnes(live)) == WORKERS, f"{WORKERS} daphne workers running", timeout=30)
        # Running is not serving: a worker still importing Django accepts nothing, and its sibling takes every
        # connection on the shared socket meanwhile. Each test starts with both workers answering.
        until_every_worker(live, lambda: get(live, "/api/health"), f"{WORKERS} workers answering", timeout=60)
        yield live
    finally:
        live.stop()


def daphnes(server: LiveServer) -> set[int]:
    return set(children_with(server.proc.pid, "daphne"))


def get(server: LiveServer, path: str, **kwargs) -> requests.Response:
    return requests.get(f"{server.base_url}{path}", timeout=20, headers={"Connection": "close",
                                                                         **kwargs.pop("headers", {})}, **kwargs)


def worker_of(response: requests.Response) -> int:
    return int(response.headers[HEADER])


def until_every_worker(server: LiveServer, call, what: str, timeout: float = 20.0) -> dict[int, requests.Response]:
    """call() (a request on a new connection) until each running worker has answered one; pid -> answer."""
    answers: dict[int, requests.Response] = {}

    def seen_all() -> bool:
        response = call()
        answers.setdefault(worker_of(response), response)
        return set(answers) >= daphnes(server)

    poll(seen_all, what, timeout=timeout, every=0)
    return answers


def test_a_thousand_requests_are_spread_over_the_workers(server):
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda _: get(server, "/api/health"), range(1000)))
    assert all(answer.status_code == 200 for answer in answers)
    served = Counter(worker_of(answer) for answer in answers)
    assert set(served) == daphnes(server), served  # the workers, and only they, answer
    assert min(served.values()) >= 20, f"a worker served almost nothing: {served}"
    # ... each naming its host too (pids repeat across containers; a proxy before several hosts tells them apart)
    assert {answer.headers["X-Agentsite-Host"] for answer in answers} == {socket.gethostname()}


def test_the_eleventh_login_attempt_is_refused_whichever_worker_counts_it(server):
    # The limit is per client address; behind one trusted proxy, X-Forwarded-For names it. Ten attempts split over
    # the workers (neither sees ten), then each worker refuses the next: they keep one count. Each goes through a
    # connection held open to its worker (a new connection goes to whichever wakes first, on a loaded machine
    # the same one every time).
    pinned = PinnedProcesses((server,))
    address = {"X-Forwarded-For": "10.30.0.1"}

    def login(pid: int) -> requests.Response:
        return pinned.via(pid, "POST", "/api/auth/login", headers=address,
                          json={"username": "admin", "password": "wrong password"})

    first = [login(pid) for pid in pinned.processes for _ in range(10 // WORKERS)]
    assert [answer.status_code for answer in first] == [401] * 10, [a.text for a in first]
    later = [login(pid) for pid in pinned.processes for _ in range(2)]
    assert [answer.status_code for answer in later] == [429] * (2 * WORKERS), [a.text for a in later]
    assert later[0].json()["error"]["code"] == "rate_limited"


def test_a_password_change_is_seen_by_every_worker_within_the_cache_lifetime(server):
    old_token = server.login()["token"]
    bearer = {"Authorization": f"Bearer {old_token}"}
    until_every_worker(server, lambda: get(server, "/api/auth/me", headers=bearer), "each worker knows the token")
    changed = requests.post(f"{server.base_url}/api/auth/change-password", headers=bearer, timeout=20, json={
        "old_password": server.admin_password, "new_password": "a new and long password 3"})
    assert changed.status_code == 200, changed.text
    changed_at = time.monotonic()
    try:
        # Every worker refuses the old token within the documented 2 s (AGENTSITE_AUTH_CACHE_S), plus a margin
        # for a loaded machine: ten requests in a row all refused, by every worker.
        def everyone_refuses() -> bool:
            answers = [get(server, "/api/auth/me", headers=bearer) for _ in range(10)]
            return all(a.status_code == 401 for a in answers) and {worker_of(a) for a in answers} == daphnes(server)

        poll(everyone_refuses, "every worker refuses the old token", timeout=4.0, every=0.05)
        assert time.monotonic() - changed_at < 4.0
        fresh = {"Authorization": f"Bearer {changed.json()['token']}"}
        accepted = until_every_worker(server, lambda: get(server, "/api/auth/me", headers=fresh),
                                      "each worker accepts the new token")
        assert all(answer.status_code == 200 for answer in accepted.values())
    finally:
        requests.post(f"{server.base_url}/api/auth/change-password", timeout=20,
                      headers={"Authorization": f"Bearer {changed.json()['token']}"},
                      json={"old_password": "a new and long password 3", "new_password": server.admin_password})


def chatting(server: LiveServer, fake_openai) -> dict[str, str]:
    """Point the server at the fake upstream, once every worker uses it; the admin's headers."""
    headers = {"Authorization": f"Bearer {server.login()['token']}", "Connection": "close"}
    patched = requests.patch(f"{server.base_url}/api/config", headers=headers, timeout=20, json={
        "provider": "openai", "base_url": fake_openai.base_url, "api_key": UPSTREAM_KEY, "model": "fake-model"})
    assert patched.status_code == 200, patched.text
    # The config reaches every worker (a cache of it lives 2 s at most without Redis).
    poll(lambda: all(answer.json()["provider"] == "openai" for answer in until_every_worker(
        server, lambda: get(server, "/api/config", headers=headers), "each worker's config").values()),
        "every worker uses the new config", timeout=10, every=0.2)
    return headers


def test_a_worker_killed_mid_stream_is_started_again_and_its_reply_marked_interrupted(server, fake_openai):
    headers = chatting(server, fake_openai)
    session = requests.post(f"{server.base_url}/api/sessions", json={"name": "killed"}, headers=headers,
                            timeout=20).json()["id"]
    fake_openai.script(Hang(text="partial answer "))
    before = daphnes(server)
    response = requests.post(f"{server.base_url}/api/sessions/{session}/chat", json={"message": "A long story"},
                             headers=headers, stream=True, timeout=30)
    events = sse_events(response)
    assert next(events)[0] == "start"
    assert next(event for event in events if event[0] != "comment")[0] == "delta"
    victim = worker_of(response)
    assert victim in before
    os.kill(victim, signal.SIGKILL)
    response.close()

    def stored_reply() -> dict | None:
        messages = get(server, f"/api/sessions/{session}/messages", headers=headers).json()["results"]
        reply = next((m for m in messages if m["role"] == "assistant"), None)
        return reply if reply and reply["status"] != "streaming" else None

    # The survivor's sweep (every 0.5 s here) marks it; 30 s leaves room for a loaded CI machine.
    reply = poll(stored_reply, "the killed worker's reply marked", timeout=30, every=0.1)
    assert reply["status"] == "interrupted", reply
    assert reply["content"] in ("", "partial answer "), reply  # what was checkpointed, nothing else
    restarted = poll(lambda: (now := daphnes(server)) and len(now) == WORKERS and victim not in now and now,
                     "serve started the worker again", timeout=60, every=0.1)
    assert restarted - before  # a new process took the dead one's place; the other worker never stopped
    assert before - {victim} <= restarted
    until_every_worker(server, lambda: get(server, "/api/health"), "the new worker serves")


def stored_process(server: LiveServer, message_id: str) -> tuple[str, str]:
    """(status, process) of a message, read from the server's database itself (`process` is not in the API)."""
    query = "SELECT status, process FROM sessions_app_chatmessage WHERE id = {}"
    if server.database_url:
        with psycopg.connect(server.database_url) as connection:
            return connection.execute(query.format("%s"), [message_id]).fetchone()
    with sqlite3.connect(server.data_dir / "db.sqlite3") as connection:
        return connection.execute(query.format("?"), [message_id.replace("-", "")]).fetchone()


def test_a_worker_that_dies_holding_a_stopped_reply_leaves_it_stopped(server, fake_openai):
    """The stop request marks the reply while its worker cannot store it (frozen, then killed): the stop answers
    after its wait with the last checkpoint, and the survivor's sweep leaves the reply `stopped` (never
    `interrupted`), its `process` cleared."""
    headers = chatting(server, fake_openai)
    session = requests.post(f"{server.base_url}/api/sessions", json={"name": "frozen"}, headers=headers,
                            timeout=20).json()["id"]
    fake_openai.script(Hang(text="partial answer "))
    response = requests.post(f"{server.base_url}/api/sessions/{session}/chat", json={"message": "A long story"},
                             headers=headers, stream=True, timeout=30)
    events = sse_events(response)
    start = next(events)
    assert start[0] == "start"
    assert next(event for event in events if event[0] != "comment")[0] == "delta"
    reply, victim = start[1]["message_id"], worker_of(response)
    messages = f"/api/sessions/{session}/messages"
    poll(lambda: get(server, messages, headers=headers).json()["results"][-1]["content"] == "partial answer ",
         "the reply checkpointed", timeout=10, every=0.1)
    os.kill(victim, signal.SIGSTOP)  # it can neither hear the stop nor store anything now
    try:
        stopped = requests.post(f"{server.base_url}/api/sessions/{session}/messages/{reply}/stop", headers=headers,
                                timeout=30)
        assert worker_of(stopped) != victim
        assert stopped.status_code == 200 and (stopped.json()["status"], stopped.json()["content"]) == (
            "stopped", "partial answer "), stopped.text
    finally:
        os.kill(victim, signal.SIGKILL)
        response.close()
    poll(lambda: stored_process(server, reply) == ("stopped", ""), "the sweep cleared the dead worker's reply",
         timeout=30, every=0.1)
    after = get(server, messages, headers=headers).json()["results"][-1]
    assert (after["status"], after["content"], after["finish_reason"]) == ("stopped", "partial answer ", "stopped")
    until_every_worker(server, lambda: get(server, "/api/health"), "the new worker serves", timeout=60)

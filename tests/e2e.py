"""Helpers for end-to-end tests: a server pointed at a fake upstream, and an SSE reader."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import requests

from agentsite.server.serve import default_workers
from tests.server import LiveServer

UPSTREAM_KEY = "sk-e2e-upstream-secret-0123456789"


def server_with_fake_upstream(fake_openai, **env: str) -> tuple[LiveServer, dict[str, str]]:
    """A daphne server whose config points the `openai` provider at the fake; returns it and admin headers."""
    server = LiveServer(command="daphne", env={"AGENTSITE_LOGIN_RATE_LIMIT": "1000",
                                               "AGENTSITE_ALLOW_PRIVATE_FETCH": "1", **env}).start()
    headers = {"Authorization": f"Bearer {server.login()['token']}"}
    response = requests.patch(f"{server.base_url}/api/config", headers=headers, timeout=10, json={
        "provider": "openai", "base_url": fake_openai.base_url, "api_key": UPSTREAM_KEY, "model": "fake-model",
        "kb_enabled": True})
    response.raise_for_status()
    return server, headers


def sse_events(response: requests.Response, on_event: Callable[[str, Any], bool] | None = None,
               ) -> Iterator[tuple[str, Any]]:
    """(event, data) pairs of an SSE response; comments come as ("comment", text), OpenAI's `[DONE]` as text."""
    event, data = None, []
    for raw in response.iter_lines(chunk_size=1, decode_unicode=True):
        line = raw if isinstance(raw, str) else raw.decode()
        if line.startswith(":"):
            yield "comment", line[1:].strip()
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
        elif line == "" and (event or data):
            payload = "\n".join(data)
            yield event or "message", (json.loads(payload) if payload[:1] in ("{", "[") and payload != "[DONE]"
                                         else payload)
            event, data = None, []


def poll(check: Callable[[], Any], what: str, timeout: float = 5.0, every: float = 0.02) -> Any:
    """Call check every `every` s until it returns something truthy; fail naming what did not happen."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"within {timeout} s: {what}")
        time.sleep(every)


def read_then_hang_up(response: requests.Response, *, deltas: int, is_delta: Callable[[str, Any], bool]) -> int:
    """Read SSE events until `deltas` of them are deltas, then close the connection; returns the count read."""
    seen = 0
    with response:
        for name, data in sse_events(response):
            if is_delta(name, data):
                seen += 1
                if seen == deltas:
                    break
    return seen


def minute_with_room(seconds: float = 15.0) -> None:
    """Return once the clock's minute has at least `seconds` left (waiting for the next one if needed): a live
    server counts per-minute limits by the clock's minute, so a test that checks one must not straddle its turn
    (the conftest's one_minute holds the clock instead for in-process calls)."""
    left = 60 - time.time() % 60
    if left < seconds:
        time.sleep(left + 0.05)


def in_parallel(count: int, work: Callable[[int], Any]) -> list[Any]:
    """Run work(0..count-1) on `count` threads at once and return the results in order."""
    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(work, range(count)))


WORKER_HEADER = "X-Agentsite-Worker"  # AGENTSITE_WORKER_HEADER: the process that answered


def one_per_worker(server: LiveServer, connect: Callable[[], tuple[int, Any]], release: Callable[[Any], None], *,
                   timeout: float, every: float = 0.0) -> dict[int, Any]:
    """Call `connect` (a request over a new connection: its answering worker's pid, and what to keep) until each of
    the server's workers has answered one, keeping the first of each and releasing the rest. A new connection is
    accepted by whichever worker is free, so only repeating finds them all: `/api/health` answers as soon as one
    worker listens, another may start accepting seconds later on a loaded machine, and the same worker can win
    every race meanwhile."""
    found: dict[int, Any] = {}
    workers = server.workers or default_workers()

    def one_more() -> bool:
        pid, held = connect()
        if pid in found:
            release(held)
        else:
            found[pid] = held
        return len(found) == workers

    poll(one_more, f"an answer from each of the {workers} workers of {server.base_url}", timeout=timeout,
         every=every)
    return found


def every_worker_answers(server: LiveServer, timeout: float = 60.0) -> set[int]:
    """Return once each of the server's workers has answered a request (a new connection each), for a test that
    counts on its requests spreading over the workers."""

    def connect() -> tuple[int, None]:
        answer = requests.get(f"{server.base_url}/api/health", headers={"Connection": "close"}, timeout=20)
        return int(answer.headers[WORKER_HEADER]), None

    return set(one_per_worker(server, connect, lambda _held: None, timeout=timeout, every=0.05))


class PinnedProcesses:
    """The servers of one deployment and a keep-alive connection pinned to each of their processes, so that a
    test sends each half of a stateful door to the process it chooses and proves, by the answer's worker header,
    that this process answered. `session_headers` go with every request; `host`, when given, is the Host every
    request names (one name for every server, as behind a load balancer)."""

    def __init__(self, servers: tuple[LiveServer, ...], *, session_headers: dict[str, str] | None = None,
                 host: str | None = None) -> None:
        self.servers, self.host = servers, host
        self._session_headers = dict(session_headers or {})
        self.pins: dict[int, tuple[LiveServer, requests.Session]] = {}
        for server in servers:
            self._pin_every_worker(server)

    def _pin_every_worker(self, server: LiveServer) -> None:
        """A keep-alive connection held to each of the server's workers."""

        def connect() -> tuple[int, requests.Session]:
            session = requests.Session()
            session.headers.update(self._session_headers)
            return int(session.get(f"{server.base_url}/api/health", timeout=20).headers[WORKER_HEADER]), session

        pinned = one_per_worker(server, connect, lambda session: session.close(), timeout=30)
        self.pins.update((pid, (server, session)) for pid, session in pinned.items())

    @property
    def processes(self) -> list[int]:
        return list(self.pins)

    def other_than(self, pid: int) -> int:
        """A process other than `pid`: on the other host when there are two."""
        host = self.pins[pid][0]
        others = [other for other in self.pins if other != pid]
        return next((other for other in others if self.pins[other][0] is not host), others[0])

    def via(self, pid: int, method: str, path: str, *, headers: dict | None = None, **kwargs) -> requests.Response:
        """A request answered by process `pid` (its pinned connection); fails if another process answered."""
        server, session = self.pins[pid]
        kwargs.setdefault("timeout", 30)
        if self.host is not None:
            headers = {"Host": self.host, **(headers or {})}
        response = session.request(method, f"{server.base_url}{path}", headers=headers, **kwargs)
        assert int(response.headers[WORKER_HEADER]) == pid, (
            f"{method} {path} was answered by another process than {pid}")
        return response

"""/mcp and /mcp/sse behind several processes: `serve --workers 2`, and two hosts (two servers on one PostgreSQL
and one Redis) with each request sent to the other. The official `mcp` client opens a new connection for every
request (no keep-alive: it would pin a session to one process), and each answer names the process that made
it (AGENTSITE_WORKER_HEADER), so the tests can show that a session's requests really landed on both.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx2
import pytest
import requests
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from tests.e2e import PinnedProcesses, every_worker_answers
from tests.mcpbridge.conftest import LIVE_ENV
from tests.server import LiveServer

pytestmark = pytest.mark.e2e

WORKER = "x-agentsite-worker"
SESSIONS = 10
CALLS = 3
AT_ONCE = 5
SESSION_DEADLINE_S = 60.0
BUILTINS = {"web_search", "web_fetch", "kb_search"}
NOTE = "The lighthouse keeper's code word is kittiwake-7."


@dataclass
class Answers:
    """Which process answered each request of one client session: (method, path, worker pid, port)."""

    seen: list[tuple[str, str, int, int]] = field(default_factory=list)

    async def record(self, response: httpx2.Response) -> None:
        request = response.request
        self.seen.append((request.method, request.url.path, int(response.headers[WORKER]), request.url.port))

    def workers(self, method: str | None = None) -> set[int]:
        return {pid for verb, _path, pid, _port in self.seen if method is None or verb == method}

    def hosts(self) -> set[int]:
        """The ports (one per host) whose workers answered."""
        return {port for _verb, _path, _pid, port in self.seen}


class Alternating(httpx2.AsyncBaseTransport):
    """Sends each request to the next of several servers in turn (the "load balancer" of the two-host test)."""

    def __init__(self, ports: list[int]) -> None:
        self._ports = itertools.cycle(ports)
        self._inner = httpx2.AsyncHTTPTransport(limits=httpx2.Limits(max_keepalive_connections=0))

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.url = request.url.copy_with(port=next(self._ports))
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


class EveryWorkerInTurn(httpx2.AsyncBaseTransport):
    """Sends each POST and DELETE of one client session to the next of a server's workers in turn, over a
    keep-alive connection held open to each; a GET (a long-lived stream) goes over a new connection of its own.
    A new connection is accepted by whichever worker wakes first, and on a loaded machine the same one can win
    every time: pinned connections make a session's messages reach every worker whatever the kernel chooses."""

    def __init__(self, workers: int) -> None:
        self._workers = workers
        self._pinned: list[httpx2.AsyncHTTPTransport] = []
        self._next = itertools.count()
        self._pinning = asyncio.Lock()
        self._fresh = httpx2.AsyncHTTPTransport(limits=httpx2.Limits(max_keepalive_connections=0))

    async def _pin(self, url: httpx2.URL) -> None:
        """Open one-connection transports until each worker holds one (its pid in the health check's answer)."""
        found: dict[int, httpx2.AsyncHTTPTransport] = {}
        async with asyncio.timeout(60):
            while len(found) < self._workers:
                # Held for the session's length: httpx closes a connection idle for 5 s by default, and the one
                # opened in its place goes to whichever worker wakes first (under load, calls come seconds apart).
                transport = httpx2.AsyncHTTPTransport(
                    limits=httpx2.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=None))
                response = await transport.handle_async_request(
                    httpx2.Request("GET", url.copy_with(path="/api/health", query=None)))
                await response.aread()
                pid = int(response.headers[WORKER])
                if pid in found:
                    await transport.aclose()
                else:
                    found[pid] = transport
        self._pinned = list(found.values())

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "GET":
            return await self._fresh.handle_async_request(request)
        async with self._pinning:
            if not self._pinned:
                await self._pin(request.url)
        return await self._pinned[next(self._next) % len(self._pinned)].handle_async_request(request)

    async def aclose(self) -> None:
        for transport in (self._fresh, *self._pinned):
            await transport.aclose()


def client_factory(answers: Answers, ports: list[int] | None = None, workers: int | None = None):
    """An httpx2 client like the SDK's own (create_mcp_http_client) that records who answered. Without keep-alive
    by default; with `ports`, each request goes to the next host; with `workers`, each message to the next
    worker of one server."""

    def factory(headers: dict[str, str] | None = None, timeout: httpx2.Timeout | None = None,
                auth: httpx2.Auth | None = None) -> httpx2.AsyncClient:
        transport: httpx2.AsyncBaseTransport
        if ports:
            transport = Alternating(ports)
        elif workers:
            transport = EveryWorkerInTurn(workers)
        else:
            transport = httpx2.AsyncHTTPTransport(limits=httpx2.Limits(max_keepalive_connections=0))
        return httpx2.AsyncClient(headers=headers, auth=auth, transport=transport,
                                  timeout=timeout or httpx2.Timeout(30.0, read=300.0),
                                  event_hooks={"response": [answers.record]})

    return factory


@asynccontextmanager
async def mcp_session(url: str, token: str, answers: Answers, ports: list[int] | None = None,
                      workers: int | None = None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"}
    factory = client_factory(answers, ports, workers)
    if url.endswith("/sse"):
        async with sse_client(url, headers=headers, httpx_client_factory=factory) as (read, write), \
                ClientSession(read, write) as session:
            yield session
        return
    async with factory(headers=headers) as client, streamable_http_client(url, http_client=client) as (read, write), \
            ClientSession(read, write) as session:
        yield session


async def use_a_session(url: str, token: str, ports: list[int] | None = None, workers: int | None = None
                        ) -> Answers:
    """initialize, list the tools, then call kb_search CALLS times; every step must succeed."""
    answers = Answers()
    async with asyncio.timeout(SESSION_DEADLINE_S), mcp_session(url, token, answers, ports, workers) as session:
        await session.initialize()
        names = {tool.name for tool in (await session.list_tools()).tools}
        assert BUILTINS <= names, names
        for _ in range(CALLS):
            found = await session.call_tool("kb_search", {"query": "lighthouse code word", "topK": 2})
            assert found.is_error is False, found
            assert "kittiwake-7" in found.content[0].text
    return answers


async def use_many_sessions(url: str, token: str, ports: list[int] | None = None, workers: int | None = None
                            ) -> list[Answers]:
    # A few at a time: each request in flight holds a database connection, and CI's PostgreSQL is shared.
    at_once = asyncio.Semaphore(AT_ONCE)

    async def one() -> Answers:
        async with at_once:
            return await use_a_session(url, token, ports, workers)

    results = await asyncio.gather(*(one() for _ in range(SESSIONS)), return_exceptions=True)
    failed = [repr(result) for result in results if isinstance(result, BaseException)]
    assert not failed, f"{len(failed)} of {SESSIONS} sessions failed: {failed[:3]}"
    return results  # type: ignore[return-value]


def add_the_note(base_url: str, token: str) -> None:
    response = requests.post(f"{base_url}/api/kb/documents", json={"filename": "lighthouse.md", "content": NOTE},
                             headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert response.status_code == 201, response.text


# --- serve --workers 2 ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def two_workers() -> Iterator[tuple[LiveServer, str]]:
    server = LiveServer(workers=2, env={**LIVE_ENV, "AGENTSITE_WORKER_HEADER": "1"}).start()
    try:
        every_worker_answers(server)  # the tests count on their requests reaching both
        token = server.login()["token"]
        add_the_note(server.base_url, token)
        yield server, token
    finally:
        server.stop()


async def test_streamable_http_sessions_work_whichever_worker_answers_each_request(two_workers):
    server, token = two_workers
    sessions = await use_many_sessions(f"{server.base_url}/mcp", token, workers=2)
    unspread = [answers.seen for answers in sessions if len(answers.workers("POST")) != 2]
    assert not unspread, f"a session's requests were not answered by both workers: {unspread[:1]}"


async def test_sse_sessions_get_their_answers_whichever_worker_takes_each_message(two_workers):
    server, token = two_workers
    sessions = await use_many_sessions(f"{server.base_url}/mcp/sse", token, workers=2)
    # Each session's stream is held by one worker; its messages went to both, so some went to the other one,
    # and every answer still came back on the stream (use_a_session checks each).
    unrelayed = [answers.seen for answers in sessions if not answers.workers("POST") - answers.workers("GET")]
    assert not unrelayed, f"no message of a session was posted to a worker without its stream: {unrelayed[:1]}"


async def test_a_deleted_streamable_http_session_is_gone_on_every_worker(two_workers):
    server, token = two_workers
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream",
               "Connection": "close"}
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw-test", "version": "1"}}}
    opened = requests.post(f"{server.base_url}/mcp", json=initialize, headers=headers, timeout=30)
    assert opened.status_code == 200, opened.text
    session = {"Mcp-Session-Id": opened.headers["Mcp-Session-Id"], "Mcp-Protocol-Version": "2025-11-25"}
    deleted = requests.delete(f"{server.base_url}/mcp", headers={**headers, **session}, timeout=30)
    assert deleted.status_code == 200, deleted.text
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    answered: dict[int, int] = {}

    def ask(_: int) -> requests.Response:
        return requests.post(f"{server.base_url}/mcp", json=listing, headers={**headers, **session}, timeout=30)

    # Four at a time, until both workers have said it: one request after another on a quiet machine is often
    # accepted by the same worker every time (whichever wakes first on the shared socket).
    with ThreadPoolExecutor(4) as pool:
        for _ in range(20):
            for response in pool.map(ask, range(4)):
                answered[int(response.headers[WORKER])] = response.status_code
            if len(answered) == 2:
                break
    assert answered and set(answered.values()) == {404}, answered
    assert len(answered) == 2, f"only one worker answered in 80 requests: {answered}"


# --- two hosts: two servers on one PostgreSQL and one Redis -------------------------------------------

REDIS_URL = os.environ.get("REDIS_URL", "")


@pytest.fixture(scope="module")
def two_hosts() -> Iterator[tuple[LiveServer, LiveServer, str]]:
    if not os.environ.get("DATABASE_URL", "").startswith("postgres") or not REDIS_URL:
        pytest.skip("needs PostgreSQL and Redis (DATABASE_URL, REDIS_URL): two hosts share only those")
    env = {**LIVE_ENV, "AGENTSITE_WORKER_HEADER": "1", "REDIS_URL": REDIS_URL,
           "AGENTSITE_CACHE_PREFIX": f"mcp-hosts-{os.getpid()}"}
    first = LiveServer(env=env).start()
    # The same database, Redis and data directory (the signing keys), another process: another host.
    second = LiveServer(env=env, data_dir=str(first.data_dir), database_url=first.database_url, migrated=False)
    try:
        second.start()
        token = first.login()["token"]
        add_the_note(first.base_url, token)
        yield first, second, token
    finally:
        second.stop(drop_database=False)
        first.stop()


@pytest.mark.parametrize("path", ["/mcp", "/mcp/sse"])
async def test_mcp_sessions_work_when_each_request_goes_to_the_other_host(two_hosts, path):
    first, second, token = two_hosts
    sessions = await use_many_sessions(f"{first.base_url}{path}", token, ports=[first.port, second.port])
    for answers in sessions:
        # Each host runs serve's default workers: two hosts answered, through any of their workers.
        assert len(answers.hosts()) == 2, f"a session's requests did not alternate between hosts: {answers.seen}"


def test_a_message_for_an_sse_stream_is_taken_from_its_owner_only_on_every_worker(two_workers):
    server, token = two_workers
    registered = requests.post(f"{server.base_url}/api/auth/register", timeout=30,
                               json={"username": "mcp-stranger", "password": "correct-horse-battery-9"})
    assert registered.status_code == 201, registered.text
    owner = {"Authorization": f"Bearer {token}"}
    stranger = {"Authorization": f"Bearer {registered.json()['token']}"}
    ping = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    pinned = PinnedProcesses((server,))
    with requests.get(f"{server.base_url}/mcp/sse", headers=owner, stream=True, timeout=30) as stream:
        lines = stream.iter_lines(decode_unicode=True)
        endpoint = next(line for line in lines if line.startswith("data:")).removeprefix("data:").strip()
        answers = {(who, pid): pinned.via(pid, "POST", endpoint, json=ping, headers=headers).status_code
                   for pid in pinned.processes for who, headers in (("owner", owner), ("stranger", stranger))}
        unknown = requests.post(f"{server.base_url}/mcp/messages/?session_id={'0' * 32}", json=ping,
                                headers=owner, timeout=30)
        malformed = requests.post(server.base_url + endpoint, data=b"{not json", headers=owner, timeout=30)
    assert len(pinned.processes) == 2
    assert {status for (who, _pid), status in answers.items() if who == "owner"} == {202}, answers
    assert {status for (who, _pid), status in answers.items() if who == "stranger"} == {404}, answers
    assert (unknown.status_code, malformed.status_code) == (404, 400)

"""Every door that keeps state between requests holds across processes: what one process starts, another reads,
decides, ends or refuses, as a user behind a load balancer would meet it.

One deployment for the module: on SQLite, one `serve` with its default workers (two on CI's machines); on
PostgreSQL + Redis, two `serve` hosts (tests/server.py TwoHosts: one database, one Redis, the same secrets,
each its own data directory, a plugin directory they share), each with its default workers. Every answer
names its process (AGENTSITE_WORKER_HEADER); each test sends the two halves of a door to two different
processes (on two hosts, to two hosts) through keep-alive connections pinned to each process, and checks
the header of every answer, so that "the other process answered" is proven, not hoped.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from agentsite.server.serve import default_workers
from plugins.loader import SETTLE_S
from tests.e2e import UPSTREAM_KEY, WORKER_HEADER, PinnedProcesses, poll, sse_events
from tests.fakes.llm import Hang, Text
from tests.mcpbridge.conftest import TIME_SERVER, processes_running
from tests.plugins.conftest import write
from tests.server import Alternating, LiveServer, TwoHosts, two_hosts_possible
from tests.workflows.conftest import graph, node

pytestmark = pytest.mark.e2e

HEADER = WORKER_HEADER
VERSION = '''
    from plugins.sdk import tool

    @tool
    def door_version() -> str:
        """Which version of the plugin answers."""
        return "{version}"
'''


class Deployment(PinnedProcesses):
    """The servers of one deployment, and a keep-alive connection pinned to each of their processes (the admin's
    token on each)."""

    def __init__(self, servers: tuple[LiveServer, ...], admin: dict[str, str], plugin_dir: Path) -> None:
        self.admin, self.plugin_dir = admin, plugin_dir
        super().__init__(servers, session_headers=admin)


@pytest.fixture(scope="module")
def deployment(fake_openai_server, tmp_path_factory) -> Iterator[Deployment]:
    plugin_dir = tmp_path_factory.mktemp("shared-plugins")
    # No plugin watchers: each process knows a plugin changed only from its own listings and the others'
    # announcements, as a worker whose watcher is late (or a host whose inotify cannot see another NFS
    # client's writes) does. The watchers' path with several workers is tests/plugins/test_e2e.py's.
    env = {"AGENTSITE_WORKER_HEADER": "1", "AGENTSITE_LOGIN_RATE_LIMIT": "1000", "AGENTSITE_PLUGIN_WATCH": "0",
           "AGENTSITE_PLUGIN_DIR": str(plugin_dir), "AGENTSITE_SSE_KEEPALIVE_S": "0.5"}
    if two_hosts_possible():
        hosts = TwoHosts(env=env).start()
        servers, stop = hosts.hosts, hosts.stop
    else:  # SQLite is one host's database: the workers of one serve
        server = LiveServer(env=env).start()
        servers, stop = (server,), server.stop
    try:
        admin = {"Authorization": f"Bearer {servers[0].login()['token']}"}
        configured = requests.patch(f"{servers[0].base_url}/api/config", headers=admin, timeout=20, json={
            "provider": "openai", "base_url": fake_openai_server.base_url, "api_key": UPSTREAM_KEY,
            "model": "fake-model", "kb_enabled": False})
        assert configured.status_code == 200, configured.text
        yield Deployment(servers, admin, plugin_dir)
    finally:
        stop()


def test_every_process_of_the_deployment_answers_as_one_server(deployment):
    expected = default_workers() * len(deployment.servers)
    assert len(deployment.processes) == expected, deployment.processes
    for pid in deployment.processes:
        assert deployment.via(pid, "GET", "/api/auth/me").json()["username"] == "admin"
    # A client that alternates between the hosts (a load balancer's round robin): a user registered through
    # one is known to the next, whichever process of which host answers.
    client = Alternating(*deployment.servers)
    registered = client.post("/api/auth/register", json={"username": "roamer", "password": "correct-horse-battery-9"})
    assert registered.status_code == 201, registered.text
    client.headers["Authorization"] = f"Bearer {registered.json()['token']}"
    answered = set()
    for _ in range(2 * len(deployment.servers)):
        assert client.get("/api/auth/me").json()["username"] == "roamer"
        answered.add(client.last_worker)
    assert answered <= set(deployment.processes), answered
    assert {deployment.pins[pid][0].base_url for pid in answered} == {server.base_url for server in deployment.servers}


def test_a_chat_stream_on_one_process_is_read_and_seen_ended_through_another(deployment, fake_openai):
    first = deployment.processes[0]
    session = deployment.via(first, "POST", "/api/sessions", json={"name": "doors"}).json()["id"]
    fake_openai.script(Hang(text="partial answer "))
    # A new connection: whichever process accepts it streams; the header says which.
    response = requests.post(f"{deployment.servers[0].base_url}/api/sessions/{session}/chat", stream=True,
                             json={"message": "A long story"}, headers={**deployment.admin, "Connection": "close"},
                             timeout=30)
    streaming = int(response.headers[HEADER])
    reader = deployment.other_than(streaming)

    def reply() -> dict | None:
        messages = deployment.via(reader, "GET", f"/api/sessions/{session}/messages").json()["results"]
        return next((message for message in messages if message["role"] == "assistant"), None)

    with response:
        events = sse_events(response)
        assert next(events)[0] == "start"
        assert next(event for event in events if event[0] != "comment") == ("delta", {"content": "partial answer "})
        # The other process reads the reply while it streams (checkpointed a second after the start).
        seen = poll(lambda: (found := reply()) and found["content"] == "partial answer " and found,
                    "the streaming reply's checkpoint read through another process", timeout=10, every=0.1)
        assert seen["status"] == "streaming"
    # The client hung up on the streaming process: the other one sees the reply stored as interrupted.
    ended = poll(lambda: (found := reply()) and found["status"] != "streaming" and found,
                 "the hung-up reply's end read through another process", timeout=15, every=0.1)
    assert (ended["status"], ended["content"]) == ("interrupted", "partial answer "), ended


def test_a_reply_streaming_on_one_process_is_stopped_through_another(deployment, fake_openai):
    """POST .../stop lands on another process (on two hosts, the other host) than the stream's: the reply is
    stored `stopped` with what it had, the stop answers it so, and the stream ends with `done`. Once before the
    first token, once with some text."""
    first = deployment.processes[0]
    session = deployment.via(first, "POST", "/api/sessions", json={"name": "stopped"}).json()["id"]
    for text in ("", "partial answer "):
        fake_openai.script(Hang(text=text))
        response = requests.post(f"{deployment.servers[0].base_url}/api/sessions/{session}/chat", stream=True,
                                 json={"message": "A long story"}, headers={**deployment.admin, "Connection": "close"},
                                 timeout=30)
        streaming = int(response.headers[HEADER])
        with response:
            events = (event for event in sse_events(response) if event[0] != "comment")
            start = next(events)
            assert start[0] == "start"
            if text:
                assert next(events) == ("delta", {"content": text})
            else:  # the upstream has the request and sends nothing
                poll(lambda: fake_openai.pending == 0, "the upstream asked", timeout=10)
            stopper = deployment.other_than(streaming)
            stopped = deployment.via(stopper, "POST", f"/api/sessions/{session}/messages/"
                                     f"{start[1]['message_id']}/stop")
            assert stopped.status_code == 200, stopped.text
            assert (stopped.json()["status"], stopped.json()["content"]) == ("stopped", text)
            rest = list(events)
        assert [name for name, _ in rest] == ["done"] and rest[0][1]["status"] == "stopped", rest
        assert rest[0][1]["content"] == text
        stored = deployment.via(stopper, "GET", f"/api/sessions/{session}/messages").json()["results"][-1]
        assert (stored["id"], stored["status"], stored["content"]) == (start[1]["message_id"], "stopped", text)


def test_an_mcp_server_connected_through_one_process_is_used_and_let_go_by_another(deployment):
    connecting = deployment.processes[0]
    calling = deployment.other_than(connecting)
    name = f"time{secrets.token_hex(3)}"
    connected = deployment.via(connecting, "POST", "/api/mcp/connect",
                               json={"name": name, "command": TIME_SERVER[0], "args": TIME_SERVER[1:]})
    assert connected.status_code == 201, connected.text
    assert processes_running("mcp_server_time", under=connecting)

    def call() -> requests.Response:
        return deployment.via(calling, "POST", "/api/mcp/call", json={
            "server": name, "tool": "get_current_time", "arguments": {"timezone": "UTC"}})

    answered = call()
    assert answered.status_code == 200 and answered.json()["is_error"] is False, answered.text
    assert processes_running("mcp_server_time", under=calling)  # it opened its own, from the stored record

    disconnected = deployment.via(connecting, "POST", "/api/mcp/disconnect", json={"name": name})
    assert disconnected.status_code == 200, disconnected.text
    assert not processes_running("mcp_server_time", under=connecting)
    refused = call()
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found", refused.text
    poll(lambda: not processes_running("mcp_server_time", under=calling),
         "the other process stopped its own connection's server once it learnt of the disconnect", timeout=10)


GATED = graph(node("in", "input"), node("ask", "approval", prompt="Ship ${in}?", timeout_s=3600),
              node("out", "output"), edges=[("in", "ask"), ("ask", "out")])


def test_an_approval_requested_in_a_run_on_one_process_is_decided_through_another(deployment):
    running = deployment.processes[0]
    deciding = deployment.other_than(running)
    workflow = deployment.via(running, "POST", "/api/workflows", json={"name": "gated", **GATED}).json()
    started = deployment.via(running, "POST", f"/api/workflows/{workflow['id']}/run", json={"input": "v2"})
    run = started.json()
    # A synchronous run: it ran in `running` until the approval node.
    assert started.status_code == 200 and run["status"] == "waiting", run
    approval = next(item for item in deployment.via(deciding, "GET", "/api/approvals").json()["results"]
                    if item["run_id"] == run["id"])
    assert (approval["prompt"], approval["status"]) == ("Ship v2?", "pending")
    decided = deployment.via(deciding, "POST", f"/api/approvals/{approval['id']}", json={"decision": "approve"})
    assert decided.status_code == 200, decided.text
    again = deployment.via(running, "POST", f"/api/approvals/{approval['id']}", json={"decision": "reject"})
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict", again.text
    url = f"/api/workflows/runs/{run['id']}"
    finished = poll(lambda: (found := deployment.via(running, "GET", url).json())["status"] not in (
        "waiting", "queued", "running") and found, "the approved run resumed and finished", timeout=60, every=0.2)
    assert finished["status"] == "success" and json.loads(finished["output"])["decision"] == "approve", finished


def test_a_replayed_webhook_delivery_is_refused_whichever_process_receives_it(deployment):
    first = deployment.processes[0]
    workflow = deployment.via(first, "POST", "/api/workflows", json={"name": "hooked", **graph(
        node("in", "input"), node("out", "output"), edges=[("in", "out")])}).json()
    trigger = deployment.via(first, "POST", f"/api/workflows/{workflow['id']}/triggers", json={}).json()
    body = json.dumps({"n": 1}).encode()
    stamp = str(int(time.time()))
    mac = hmac.new(trigger["secret"].encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    signed = {"Content-Type": "application/json", "X-Agentsite-Timestamp": stamp,
              "X-Agentsite-Signature": f"sha256={mac}", "Authorization": None}  # not the admin's token

    def deliver(pid: int) -> requests.Response:
        return deployment.via(pid, "POST", f"/hooks/{trigger['id']}", data=body, headers=signed)

    accepted = deliver(first)
    assert accepted.status_code == 200, accepted.text
    for pid in [deployment.other_than(first), *deployment.processes]:  # the other host first, then every process
        replayed = deliver(pid)
        assert replayed.status_code == 409 and replayed.json()["error"]["code"] == "signature_replayed", \
            (pid, replayed.text)


def test_a_plugins_new_version_runs_in_every_process_as_soon_as_any_lists_it(deployment):
    path = deployment.plugin_dir / "doorplug.py"

    def answer(pid: int) -> str | None:
        called = deployment.via(pid, "POST", "/api/mcp/call", json={"server": "plugin:doorplug",
                                                                  "tool": "door_version", "arguments": {}})
        return called.json()["content"][0]["text"] if called.status_code == 200 else None

    write(path, VERSION.format(version="one"))
    for pid in deployment.processes:
        poll(lambda pid=pid: answer(pid) == "one", f"process {pid} serving the new plugin", timeout=10, every=0.05)

    write(path, VERSION.format(version="two"))
    first = deployment.processes[0]
    poll(lambda: answer(first) == "two", "one process serving the new version", timeout=10, every=0.01)
    # From the moment one process serves it, every other one does: no waiting for its own watcher.
    assert {pid: answer(pid) for pid in deployment.processes} == dict.fromkeys(deployment.processes, "two")

    for number in range(3, 23):  # a burst of twenty writes, back to back
        write(path, VERSION.format(version=number))
    written = time.monotonic()
    for pid in deployment.processes:
        # Listed with the last version within the debounce (plus a margin for a loaded machine), never
        # missing for longer: each listing loads what settled on disk, whatever its process's watcher does.
        poll(lambda pid=pid: answer(pid) == "22", f"process {pid} serving the burst's last write",
             timeout=SETTLE_S + 5, every=0.02)
    assert time.monotonic() - written < SETTLE_S + 5
    path.unlink()
    for pid in deployment.processes:
        poll(lambda pid=pid: answer(pid) is None, f"process {pid} letting the removed plugin go", timeout=10)


def _user(deployment: Deployment, name: str) -> tuple[int, dict[str, str]]:
    """A new user made through the admin's first process: (id, its bearer headers)."""
    first = deployment.processes[0]
    made = deployment.via(first, "POST", "/api/auth/register", headers={"Authorization": None},
                          json={"username": name, "password": "correct-horse-battery-9"})
    assert made.status_code == 201, made.text
    return int(made.json()["user"]["id"]), {"Authorization": f"Bearer {made.json()['token']}"}


def test_a_member_removed_from_a_group_loses_its_shared_collection_on_the_next_request_in_every_process(deployment):
    suffix = secrets.token_hex(3)
    alice_id, alice = _user(deployment, f"alice{suffix}")
    bob_id, bob = _user(deployment, f"bob{suffix}")
    first = deployment.processes[0]
    group = deployment.via(first, "POST", "/api/groups", json={"name": f"team{suffix}"}).json()
    for user in (alice_id, bob_id):
        assert deployment.via(first, "POST", f"/api/groups/{group['id']}/members", json={"user": user}).ok
    collection = deployment.via(first, "POST", "/api/kb/collections", headers=alice,
                                json={"name": "handbook"}).json()
    added = deployment.via(first, "POST", "/api/kb/documents", headers=alice, json={
        "collection": collection["id"], "filename": "leave.md",
        "content": "Parental leave is sixteen weeks at full pay, taken within the child's first year."})
    assert added.status_code == 201, added.text
    shared = deployment.via(first, "PUT", f"/api/kb/collections/{collection['id']}/access", headers=alice, json={
        "visibility": "shared", "grants": [{"group": group["id"], "role": "viewer"}]})
    assert shared.status_code == 200, shared.text

    def search(pid: int) -> requests.Response:
        return deployment.via(pid, "POST", "/api/kb/search", headers=bob,
                              json={"query": "parental leave weeks", "collections": [collection["id"]]})

    for pid in deployment.processes:  # every process answers bob, and holds whatever it caches of him
        found = search(pid)
        assert found.status_code == 200 and found.json()["results"], (pid, found.text)
        assert deployment.via(pid, "GET", "/api/auth/me", headers=bob).json()["groups"][0]["id"] == group["id"]
    removing = deployment.other_than(first)
    removed = deployment.via(removing, "DELETE", f"/api/groups/{group['id']}/members/{bob_id}")
    assert removed.status_code == 204, removed.text
    # The next request, whichever process (and host) takes it, no longer finds the collection: no waiting.
    for pid in [first, *deployment.processes]:
        refused = search(pid)
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found", (pid, refused.text)
        assert deployment.via(pid, "GET", "/api/auth/me", headers=bob).json()["groups"] == [], pid


def test_an_agents_change_and_its_rule_count_on_the_next_request_in_every_process(deployment, fake_openai):
    suffix = secrets.token_hex(3)
    alice_id, alice = _user(deployment, f"alice{suffix}")
    bob_id, bob = _user(deployment, f"bob{suffix}")
    first = deployment.processes[0]
    group = deployment.via(first, "POST", "/api/groups", json={"name": f"crew{suffix}"}).json()
    assert deployment.via(first, "POST", f"/api/groups/{group['id']}/members", json={"user": bob_id}).ok
    slug = f"guide{suffix}"
    agent = deployment.via(first, "POST", "/api/agents", headers=alice,
                           json={"slug": slug, "name": "Guide", "instructions": "Answer as the first guide."}).json()
    shared = deployment.via(first, "PUT", f"/api/agents/{agent['id']}/access", headers=alice, json={
        "visibility": "shared", "grants": [{"group": group["id"], "role": "viewer"}]})
    assert shared.status_code == 200, shared.text

    fake_openai.script(*[Text("noted")] * (3 * len(deployment.processes) + 2))

    def ask(pid: int) -> requests.Response:
        return deployment.via(pid, "POST", "/v1/chat/completions", headers=bob, json={
            "model": f"agent:{slug}", "messages": [{"role": "user", "content": "hello"}]})

    def instructions_sent() -> str:
        return fake_openai.bodies()[-1]["messages"][0]["content"]

    for pid in deployment.processes:  # every process answers bob once, and keeps whatever it caches of the agent
        answered = ask(pid)
        assert answered.status_code == 200, (pid, answered.text)
        assert instructions_sent() == "Answer as the first guide.", pid
    changing = deployment.other_than(first)
    changed = deployment.via(changing, "PATCH", f"/api/agents/{agent['id']}", headers=alice,
                             json={"instructions": "Answer as the second guide."})
    assert changed.status_code == 200, changed.text
    for pid in [first, *deployment.processes]:  # the next request anywhere runs the change: no waiting
        assert ask(pid).status_code == 200, pid
        assert instructions_sent() == "Answer as the second guide.", pid
    # Unshared through one process: the next request in every process does not find it.
    private = deployment.via(changing, "PUT", f"/api/agents/{agent['id']}/access", headers=alice,
                             json={"visibility": "private", "grants": []})
    assert private.status_code == 200, private.text
    for pid in [first, *deployment.processes]:
        refused = ask(pid)
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "model_not_found", (pid, refused.text)
        listed = deployment.via(pid, "GET", "/v1/models", headers=bob).json()["data"]
        assert f"agent:{slug}" not in [model["id"] for model in listed], pid


def _a2a(deployment: Deployment, pid: int, method: str, params: dict, **kwargs) -> requests.Response:
    """An A2A 1.0 JSON-RPC call to the agent `default`, answered by process `pid`."""
    return deployment.via(pid, "POST", "/a2a/default", headers={"A2A-Version": "1.0"}, json={
        "jsonrpc": "2.0", "id": 1, "method": method, "params": params}, **kwargs)


def test_an_a2a_task_running_on_one_process_is_followed_read_and_cancelled_through_another(deployment, fake_openai):
    running = deployment.processes[0]
    other = deployment.other_than(running)
    pieces = [f"piece {index} " for index in range(6)]
    fake_openai.script(Text("".join(pieces), pieces=pieces, delay=0.2))
    sent = _a2a(deployment, running, "SendMessage", {"message": {
        "messageId": secrets.token_hex(4), "role": "ROLE_USER", "parts": [{"text": "Slowly, please."}]},
        "configuration": {"returnImmediately": True}})
    task_id = sent.json()["result"]["task"]["id"]
    with _a2a(deployment, other, "SubscribeToTask", {"id": task_id}, stream=True) as followed:
        results = [data["result"] for _name, data in sse_events(followed)
                   if isinstance(data, dict) and "result" in data]
    assert results[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED", results
    got = _a2a(deployment, other, "GetTask", {"id": task_id}).json()["result"]
    assert "".join(part["text"] for part in got["artifacts"][0]["parts"]) == "".join(pieces)

    fake_openai.script(Hang())
    hanging = _a2a(deployment, running, "SendMessage", {"message": {
        "messageId": secrets.token_hex(4), "role": "ROLE_USER", "parts": [{"text": "Take forever."}]},
        "configuration": {"returnImmediately": True}}).json()["result"]["task"]["id"]
    poll(lambda: fake_openai.pending == 0, "the upstream asked", timeout=10)
    cancelled = _a2a(deployment, other, "CancelTask", {"id": hanging}).json()["result"]
    assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
    # The run stops where it runs (the cancel is announced across processes and hosts): the model's request closes.
    poll(lambda: fake_openai.hangups == 1, "the upstream's hang-up", timeout=5)
    assert _a2a(deployment, running, "GetTask", {"id": hanging}).json()["result"]["status"]["state"] == (
        "TASK_STATE_CANCELED")

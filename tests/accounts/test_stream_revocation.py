"""Open streams die with their credential, on a real server: a logout, a password change, or the user deactivated
or deleted (through Django admin, as an operator does) while a stream is open ends that stream at its next event
with an error event in the stream's own format, and the stream's work stops (the upstream request is closed).

The chat and workflow streams wait on a model that never finishes (the fake's Hang) and send keep-alives every
0.2 s, so their next event after the change is a keep-alive's turn; /v1 streams a paced reply; the MCP streams
wait on a plugin tool held open by a gate this test releases after the change.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from html.parser import HTMLParser

import pytest
import requests
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.e2e import UPSTREAM_KEY, poll, sse_events
from tests.fakes.llm import Hang, Text
from tests.server import LiveServer
from tests.workflows.conftest import graph, node

PASSWORD = "violet-anchor-mosaic-7"
DEADLINE_S = 10.0
GATE_PLUGIN = '''
import socket

from plugins.sdk import tool


@tool
def wait_for_gate(port: int) -> str:
    """Connect to the test's gate on 127.0.0.1:port and return once it sends a byte."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        return "released: " + sock.recv(1).decode()
'''
ASK = graph(node("start", "input"), node("ask", "llm", prompt="Answer: ${input}"),
            node("out", "output", outputFormat="text"), edges=[("start", "ask"), ("ask", "out")])


@pytest.fixture(scope="module")
def live(fake_openai_server, tmp_path_factory) -> Iterator[LiveServer]:
    plugins = tmp_path_factory.mktemp("plugins")
    (plugins / "gate.py").write_text(GATE_PLUGIN)
    server = LiveServer(command="daphne", env={
        "AGENTSITE_LOGIN_RATE_LIMIT": "1000", "AGENTSITE_SSE_KEEPALIVE_S": "0.2",
        "AGENTSITE_PLUGIN_DIR": str(plugins)}).start()
    admin = {"Authorization": f"Bearer {server.login()['token']}"}
    requests.patch(f"{server.base_url}/api/config", headers=admin, timeout=10, json={
        "provider": "openai", "base_url": fake_openai_server.base_url, "api_key": UPSTREAM_KEY,
        "model": "fake-model", "kb_enabled": False}).raise_for_status()
    yield server
    server.stop()


class User:
    """A user registered for one test, with its first login's tokens."""

    def __init__(self, live: LiveServer) -> None:
        self.live = live
        self.username = f"u-{secrets.token_hex(4)}"
        answer = requests.post(f"{live.base_url}/api/auth/register", timeout=10,
                               json={"username": self.username, "password": PASSWORD})
        assert answer.status_code == 201, answer.text
        body = answer.json()
        self.id, self.token, self.refresh = body["user"]["id"], body["token"], body["refresh"]
        self.headers = {"Authorization": f"Bearer {self.token}"}

    def login_again(self) -> dict[str, str]:
        """Headers of a new login (after a logout: the password is unchanged)."""
        return {"Authorization": f"Bearer {self.live.login(self.username, PASSWORD)['token']}"}

    def post(self, path: str, body: dict, **kwargs) -> requests.Response:
        return requests.post(f"{self.live.base_url}{path}", json=body, headers=self.headers, timeout=10, **kwargs)


# --- the four ways a credential dies ----------------------------------------------------------------

class _FormFields(HTMLParser):
    """The fields a browser would submit from Django admin's change form, as they stand."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: dict[str, str] = {}
        self._select: str | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attributes = dict(attrs)
        name = attributes.get("name")
        if tag == "input" and name and attributes.get("type") not in ("submit", "button"):
            if attributes.get("type") != "checkbox" or "checked" in attributes:
                self.fields[name] = attributes.get("value") or ("on" if attributes.get("type") == "checkbox" else "")
        elif tag == "select":
            self._select = name
        elif tag == "option" and self._select and "selected" in attributes:
            self.fields[self._select] = attributes.get("value", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self._select = None


def _admin_session(live: LiveServer) -> requests.Session:
    session = requests.Session()
    session.get(f"{live.base_url}/admin/login/", timeout=10)
    answer = session.post(f"{live.base_url}/admin/login/", timeout=10, allow_redirects=False, data={
        "username": "admin", "password": live.admin_password, "next": "/admin/",
        "csrfmiddlewaretoken": session.cookies["csrftoken"]})
    assert answer.status_code == 302, answer.text[:500]
    return session


def deactivate_in_admin(live: LiveServer, user: User) -> None:
    session = _admin_session(live)
    url = f"{live.base_url}/admin/auth/user/{user.id}/change/"
    form = _FormFields()
    form.feed(session.get(url, timeout=10).text)
    fields = {name: value for name, value in form.fields.items() if name != "is_active"}  # the box unticked
    fields["csrfmiddlewaretoken"] = session.cookies["csrftoken"]
    answer = session.post(url, data=fields, timeout=10, allow_redirects=False)
    assert answer.status_code == 302, f"the admin refused the change: {answer.text[:2000]}"


def delete_in_admin(live: LiveServer, user: User) -> None:
    session = _admin_session(live)
    answer = session.post(f"{live.base_url}/admin/auth/user/{user.id}/delete/", timeout=10, allow_redirects=False,
                          data={"post": "yes", "csrfmiddlewaretoken": session.cookies["csrftoken"]})
    assert answer.status_code == 302, answer.text[:500]


def log_out(live: LiveServer, user: User) -> None:
    assert user.post("/api/auth/logout", {"refresh": user.refresh}).status_code == 204


def change_password(live: LiveServer, user: User) -> None:
    answer = user.post("/api/auth/change-password", {"old_password": PASSWORD, "new_password": PASSWORD + "-new"})
    assert answer.status_code == 200, answer.text


CHANGES: dict[str, Callable[[LiveServer, User], None]] = {
    "logout": log_out, "password change": change_password, "deactivation": deactivate_in_admin,
    "deletion": delete_in_admin}


def next_event_after(events: Iterator[tuple[str, object]]) -> tuple[str, object]:
    """The first event that is not a keep-alive, within the deadline; then the stream must end."""
    deadline = time.monotonic() + DEADLINE_S
    for name, data in events:
        if name != "comment":
            assert next(events, None) is None, "the stream went on after its terminal event"
            return name, data
        assert time.monotonic() < deadline, f"the stream was still open {DEADLINE_S} s after the change"
    raise AssertionError("the stream ended without an event")


# --- the chat and workflow streams ------------------------------------------------------------------

@pytest.mark.e2e
@pytest.mark.parametrize("change", list(CHANGES))
def test_a_chat_stream_ends_at_its_next_event_when_its_credential_dies(live, fake_openai, change):
    user = User(live)
    session = user.post("/api/sessions", {"name": "revoked"}).json()
    fake_openai.script(Hang(text="Thinking "))
    with user.post(f"/api/sessions/{session['id']}/chat", {"message": "hello"}, stream=True) as response:
        assert response.status_code == 200
        events = sse_events(response)
        assert next(data for name, data in events if name == "delta")["content"] == "Thinking "
        CHANGES[change](live, user)
        name, data = next_event_after(events)
    assert name == "error" and data["code"] == "token_invalid", (name, data)
    fake_openai.wait_for_hangups_sync(1, timeout=DEADLINE_S)  # the turn stopped, and with it the upstream request
    if change == "logout":  # the user can log in again and find the partial reply stored as interrupted
        headers = user.login_again()
        url = f"{live.base_url}/api/sessions/{session['id']}/messages"
        poll(lambda: [(item["role"], item["status"]) for item in requests.get(
            url, headers=headers, timeout=10).json()["results"]][-1] == ("assistant", "interrupted"),
             "the partial reply stored as interrupted")


@pytest.mark.e2e
@pytest.mark.parametrize("change", ["logout", "deactivation"])
def test_a_streamed_workflow_run_ends_at_its_next_event_when_its_credential_dies(live, fake_openai, change):
    user = User(live)
    workflow = user.post("/api/workflows", {"name": "ask", **ASK})
    assert workflow.status_code == 201, workflow.text
    fake_openai.script(Hang(text="Thinking "))
    with user.post(f"/api/workflows/{workflow.json()['id']}/run", {"input": "q", "stream": True},
                   stream=True) as response:
        assert response.status_code == 200
        events = sse_events(response)
        assert next(data for name, data in events if name == "delta")["content"] == "Thinking "
        CHANGES[change](live, user)
        name, data = next_event_after(events)
    assert name == "error" and data["code"] == "token_invalid", (name, data)
    fake_openai.wait_for_hangups_sync(1, timeout=DEADLINE_S)
    if change == "logout":  # the user can log in again and find the run stopped
        headers = user.login_again()
        url = f"{live.base_url}/api/workflows/{workflow.json()['id']}/runs"
        poll(lambda: requests.get(url, headers=headers, timeout=10).json()["results"][0]["status"] == "cancelled",
             "the run stored as cancelled")


# --- /v1 ------------------------------------------------------------------------------------------

WORDS = [f"word{index} " for index in range(400)]


def _v1_chunks(response: requests.Response) -> Iterator[object]:
    """The data of each event of a /v1 stream: a chunk or an error object, or the text `[DONE]`."""
    for line in response.iter_lines(chunk_size=1, decode_unicode=True):
        if line.startswith("data: "):
            yield line[6:] if line[6:] == "[DONE]" else json.loads(line[6:])


@pytest.mark.e2e
@pytest.mark.parametrize("change", ["password change", "logout"])
def test_a_streamed_v1_completion_made_with_a_token_ends_at_its_next_chunk_when_the_token_dies(live, fake_openai,
                                                                                                 change):
    user = User(live)
    fake_openai.script(Text("".join(WORDS), pieces=WORDS, delay=0.05))  # 20 s in all, if nothing stops it
    with user.post("/v1/chat/completions", {"model": "fake-model", "stream": True,
                                            "messages": [{"role": "user", "content": "count"}]},
                   stream=True) as response:
        assert response.status_code == 200
        chunks = _v1_chunks(response)
        text = ""
        while "word0" not in text:
            text += next(chunks)["choices"][0]["delta"].get("content") or ""
        CHANGES[change](live, user)
        rest = list(chunks)
    assert rest, "the stream ended without an error chunk"
    assert rest[-1]["error"]["code"] == "token_invalid" and rest[-1]["error"]["type"] == "authentication_error"
    assert "[DONE]" not in rest
    text += "".join(chunk["choices"][0]["delta"].get("content") or "" for chunk in rest[:-1])
    assert len(text) < len("".join(WORDS)), "the whole reply was sent after the token died"
    fake_openai.wait_for_hangups_sync(1, timeout=DEADLINE_S)


# --- /mcp and /mcp/sse ----------------------------------------------------------------------------

class Gate:
    """A loopback socket the gate plugin's tool connects to: `entered` once the tool runs, `release()` returns
    it."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.entered = threading.Event()
        self._connection: socket.socket | None = None
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self._connection, _ = self.listener.accept()
        self.entered.set()

    def release(self) -> None:
        assert self._connection is not None
        self._connection.sendall(b"x")
        self._connection.close()
        self.listener.close()


async def _call_through_the_gate(url: str, user: User, change: Callable[[], None]) -> object:
    """Call the gate tool over MCP as `user`; while it runs, apply `change`, then release it. Returns what the
    call raised or returned."""
    gate = Gate()
    transport = (sse_client(url, headers=user.headers) if url.endswith("/sse") else
                 _streamable(url, user.headers))
    async with transport as streams, ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        call = asyncio.create_task(session.call_tool("wait_for_gate", {"port": gate.port}))
        entered = await asyncio.to_thread(gate.entered.wait, DEADLINE_S)
        assert entered, "the gate tool did not start"
        await asyncio.to_thread(change)
        gate.release()
        try:
            async with asyncio.timeout(DEADLINE_S):
                return await call
        except MCPError as exc:
            return exc


class _streamable:
    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self.url, self.headers = url, headers

    async def __aenter__(self):
        self._client = create_mcp_http_client(headers=self.headers)
        client = await self._client.__aenter__()
        self._transport = streamable_http_client(self.url, http_client=client)
        read, write, *_ = await self._transport.__aenter__()
        return read, write

    async def __aexit__(self, *exc_info):
        try:
            await self._transport.__aexit__(*exc_info)
        finally:
            await self._client.__aexit__(*exc_info)


@pytest.mark.e2e
@pytest.mark.parametrize(("path", "change"), [("/mcp/sse", "logout"), ("/mcp", "deactivation"),
                                              ("/mcp/sse", "password change"), ("/mcp", "logout")])
async def test_an_mcp_stream_answers_the_call_in_flight_with_an_error_when_its_credential_dies(live, path, change):
    user = User(live)
    outcome = await _call_through_the_gate(f"{live.base_url}{path}", user, lambda: CHANGES[change](live, user))
    assert isinstance(outcome, MCPError), f"the call went on after the credential died: {outcome!r}"
    assert outcome.error.code == -32000 and outcome.error.data == {"code": "token_invalid"}


@pytest.mark.e2e
async def test_an_mcp_call_through_the_gate_returns_while_the_credential_stands(live):
    user = User(live)
    outcome = await _call_through_the_gate(f"{live.base_url}/mcp/sse", user, lambda: None)
    assert not isinstance(outcome, MCPError), outcome
    assert outcome.content[0].text == "released: x"


@pytest.mark.e2e
def test_the_gate_plugin_is_loaded(live):
    user = User(live)
    listed = requests.get(f"{live.base_url}/api/mcp/tools", headers=user.headers, timeout=10).json()["tools"]
    assert "wait_for_gate" in {item["tool"]["name"] for item in listed}, json.dumps(listed)[:500]


# --- two processes of one deployment --------------------------------------------------------------

REDIS_URL = os.environ.get("REDIS_URL", "")


@pytest.fixture(scope="module")
def two_processes(fake_openai_server) -> Iterator[tuple[LiveServer, LiveServer]]:
    """Two daphne processes on one database and one Redis (one deployment: one cache prefix, one signing key).
    Each keeps a user it has read for an hour, so only the invalidation channel can tell it of a change."""
    if not REDIS_URL:  # the SQLite pass has no Redis by design; the PostgreSQL + Redis pass runs this
        pytest.skip("needs REDIS_URL: two processes share revocations through Redis")
    prefix = f"revoke-{secrets.token_hex(4)}"
    env = {"REDIS_URL": REDIS_URL, "AGENTSITE_CACHE_PREFIX": prefix,
           "AGENTSITE_AUTH_CACHE_S": "3600", "AGENTSITE_SSE_KEEPALIVE_S": "0.2", "AGENTSITE_LOGIN_RATE_LIMIT": "1000"}
    first = LiveServer(command="daphne", env=env).start()
    second = LiveServer(command="daphne", env=env, data_dir=str(first.data_dir), database_url=first.database_url,
                        migrated=False)
    try:
        second.start()
        admin = {"Authorization": f"Bearer {first.login()['token']}"}
        requests.patch(f"{first.base_url}/api/config", headers=admin, timeout=10, json={
            "provider": "openai", "base_url": fake_openai_server.base_url, "api_key": UPSTREAM_KEY,
            "model": "fake-model", "kb_enabled": False}).raise_for_status()
        yield first, second, prefix
    finally:
        second.stop(drop_database=False)
        first.stop()


@pytest.mark.e2e  # two live servers (PostgreSQL + Redis runs only)
def test_a_logout_on_one_process_ends_the_token_and_its_open_stream_on_another(two_processes, fake_openai):
    import redis

    first, second, prefix = two_processes
    user = User(first)
    on_second = User.__new__(User)
    on_second.__dict__.update(user.__dict__, live=second)
    assert requests.get(f"{second.base_url}/api/auth/me", headers=user.headers, timeout=10).status_code == 200
    # Both processes listen (a listener drops everything when it subscribes); the second then reads the user
    # once more, and keeps it for an hour: from here on, only an announcement can make it read the user again.
    channel = f"{prefix}:invalidate"
    poll(lambda: dict(redis.Redis.from_url(REDIS_URL).pubsub_numsub(channel)).get(channel.encode()) == 2,
         "both server processes subscribed to the invalidation channel")
    assert requests.get(f"{second.base_url}/api/auth/me", headers=user.headers, timeout=10).status_code == 200
    session = on_second.post("/api/sessions", {"name": "elsewhere"}).json()
    fake_openai.script(Hang(text="Thinking "))
    with on_second.post(f"/api/sessions/{session['id']}/chat", {"message": "hello"}, stream=True) as response:
        events = sse_events(response)
        assert next(data for name, data in events if name == "delta")["content"] == "Thinking "
        log_out(first, user)  # answered by the first process
        name, data = next_event_after(events)
    assert name == "error" and data["code"] == "token_invalid", (name, data)
    refused = requests.get(f"{second.base_url}/api/auth/me", headers=user.headers, timeout=10)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "token_invalid"


# --- API keys (issue 27): the same cuts for a stream opened with a key ------------------------------------

def keyed(user: User, scopes: list[str], header: str = "bearer", **fields) -> User:
    """`user` speaking with a new API key of theirs (its id in `key_id`) instead of their token."""
    made = user.post("/api/keys", {"name": "stream", "scopes": scopes, **fields})
    assert made.status_code == 201, made.text
    other = User.__new__(User)
    secret = made.json()["key"]
    other.__dict__.update(user.__dict__, key_id=made.json()["id"], headers=(
        {"Authorization": f"Bearer {secret}"} if header == "bearer" else {"x-api-key": secret}))
    return other


def revoke_key(live: LiveServer, user: User) -> None:
    answer = requests.delete(f"{live.base_url}/api/keys/{user.key_id}", timeout=10,
                             headers={"Authorization": f"Bearer {user.token}"})
    assert answer.status_code == 204, answer.text


def _as_token_holder(change: Callable[[LiveServer, User], None]) -> Callable[[LiveServer, User], None]:
    def apply(live: LiveServer, user: User) -> None:
        holder = User.__new__(User)
        holder.__dict__.update(user.__dict__, headers={"Authorization": f"Bearer {user.token}"})
        change(live, holder)
    return apply


KEY_CHANGES: dict[str, Callable[[LiveServer, User], None]] = {
    "revocation": revoke_key, "password change": _as_token_holder(change_password),
    "deactivation": deactivate_in_admin, "deletion": delete_in_admin}


def _v1_stream_cut(live: LiveServer, user: User, change: Callable[[], None]) -> tuple[list, str]:
    with requests.post(f"{live.base_url}/v1/chat/completions", headers=user.headers, timeout=10, stream=True, json={
            "model": "fake-model", "stream": True, "messages": [{"role": "user", "content": "count"}]}) as response:
        assert response.status_code == 200, response.text
        chunks = _v1_chunks(response)
        text = ""
        while "word0" not in text:
            text += next(chunks)["choices"][0]["delta"].get("content") or ""
        change()
        rest = list(chunks)
    return rest, text + "".join(chunk["choices"][0]["delta"].get("content") or "" for chunk in rest[:-1])


@pytest.mark.e2e
@pytest.mark.parametrize(("header", "change"), [("bearer", "revocation"), ("x-api-key", "revocation"),
                                                ("x-api-key", "password change"), ("bearer", "deactivation"),
                                                ("x-api-key", "deletion")])
def test_a_streamed_v1_completion_made_with_a_key_ends_at_its_next_chunk_when_the_key_dies(live, fake_openai,
                                                                                           header, change):
    user = keyed(User(live), ["v1"], header)
    fake_openai.script(Text("".join(WORDS), pieces=WORDS, delay=0.05))
    rest, text = _v1_stream_cut(live, user, lambda: KEY_CHANGES[change](live, user))
    assert rest and rest[-1]["error"]["code"] == "token_invalid", rest[-3:]
    assert rest[-1]["error"]["type"] == "authentication_error" and "[DONE]" not in rest
    assert len(text) < len("".join(WORDS)), "the whole reply was sent after the key died"
    fake_openai.wait_for_hangups_sync(1, timeout=DEADLINE_S)
    refused = requests.get(f"{live.base_url}/v1/models", headers=user.headers, timeout=10)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"


@pytest.mark.e2e
def test_a_streamed_v1_completion_ends_when_its_key_expires_mid_stream(live, fake_openai):
    from datetime import UTC, datetime, timedelta

    account = User(live)  # registered first: under load, a registration alone can outlast a 2 s expiry
    expiry = datetime.now(UTC) + timedelta(seconds=3)
    user = keyed(account, ["v1"], "x-api-key", expires_at=expiry.isoformat())
    fake_openai.script(Text("".join(WORDS), pieces=WORDS, delay=0.05))  # 20 s, if nothing stops it
    rest, text = _v1_stream_cut(live, user, lambda: None)
    assert rest[-1]["error"]["code"] == "token_invalid" and "expired" in rest[-1]["error"]["message"]
    assert datetime.now(UTC) >= expiry and len(text) < len("".join(WORDS))


@pytest.mark.e2e
def test_a_chat_stream_made_with_a_key_ends_at_its_next_event_when_the_key_is_revoked(live, fake_openai):
    user = keyed(User(live), ["api"])
    session = user.post("/api/sessions", {"name": "with a key"})
    assert session.status_code == 201, session.text
    fake_openai.script(Hang(text="Thinking "))
    with user.post(f"/api/sessions/{session.json()['id']}/chat", {"message": "hello"}, stream=True) as response:
        assert response.status_code == 200
        events = sse_events(response)
        assert next(data for name, data in events if name == "delta")["content"] == "Thinking "
        revoke_key(live, user)
        name, data = next_event_after(events)
    assert name == "error" and data["code"] == "token_invalid", (name, data)
    fake_openai.wait_for_hangups_sync(1, timeout=DEADLINE_S)


@pytest.mark.e2e
def test_a_regenerated_reply_streamed_with_a_key_ends_at_its_next_event_when_the_key_is_revoked(live, fake_openai):
    user = keyed(User(live), ["api"])
    session = user.post("/api/sessions", {"name": "regenerated with a key"}).json()["id"]
    fake_openai.script(Text("First answer."))
    with user.post(f"/api/sessions/{session}/chat", {"message": "hello"}, stream=True) as response:
        done = next(data for name, data in sse_events(response) if name == "done")
    fake_openai.script(Hang(text="Again "))
    with user.post(f"/api/sessions/{session}/messages/{done['message_id']}/regenerate", {}, stream=True) as response:
        assert response.status_code == 200, response.text
        events = sse_events(response)
        assert next(data for name, data in events if name == "delta")["content"] == "Again "
        revoke_key(live, user)
        name, data = next_event_after(events)
    assert name == "error" and data["code"] == "token_invalid", (name, data)
    fake_openai.wait_for_hangups_sync(1, timeout=DEADLINE_S)


@pytest.mark.e2e
@pytest.mark.parametrize(("path", "change"), [("/mcp/sse", "revocation"), ("/mcp", "revocation"),
                                              ("/mcp", "password change")])
async def test_an_mcp_stream_made_with_a_key_answers_the_call_in_flight_with_an_error_when_the_key_dies(
        live, path, change):
    user = await asyncio.to_thread(lambda: keyed(User(live), ["mcp"]))
    outcome = await _call_through_the_gate(f"{live.base_url}{path}", user, lambda: KEY_CHANGES[change](live, user))
    assert isinstance(outcome, MCPError), f"the call went on after the key died: {outcome!r}"
    assert outcome.error.code == -32000 and outcome.error.data == {"code": "token_invalid"}


@pytest.mark.e2e  # two live servers (PostgreSQL + Redis runs only)
def test_a_key_revoked_on_one_process_ends_its_open_stream_on_another(two_processes, fake_openai):
    import redis

    first, second, prefix = two_processes
    user = keyed(User(first), ["v1"], "x-api-key")
    channel = f"{prefix}:invalidate"
    poll(lambda: dict(redis.Redis.from_url(REDIS_URL).pubsub_numsub(channel)).get(channel.encode()) == 2,
         "both server processes subscribed to the invalidation channel")
    # The second process reads the key now and keeps it for an hour: only an announcement can change that.
    assert requests.get(f"{second.base_url}/v1/models", headers=user.headers, timeout=10).status_code == 200
    fake_openai.script(Text("".join(WORDS), pieces=WORDS, delay=0.05))
    rest, _text = _v1_stream_cut(second, user, lambda: revoke_key(first, user))  # revoked on the first
    assert rest[-1]["error"]["code"] == "token_invalid" and "revoked" in rest[-1]["error"]["message"]
    refused = requests.get(f"{second.base_url}/v1/models", headers=user.headers, timeout=10)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"


@pytest.mark.e2e
def test_revoking_a_key_on_one_process_stops_the_keys_it_made_on_another_at_once(two_processes):
    import redis

    first, second, prefix = two_processes
    parent = keyed(User(first), ["api", "v1"])
    child = keyed(parent, ["v1"])  # made with the parent key: below it
    grandchild = keyed(keyed(parent, ["api", "v1"]), ["v1"])
    # Each process starts listening at its first read of a key (this test may be the module's first).
    assert requests.get(f"{second.base_url}/v1/models", headers=child.headers, timeout=10).status_code == 200
    channel = f"{prefix}:invalidate"
    poll(lambda: dict(redis.Redis.from_url(REDIS_URL).pubsub_numsub(channel)).get(channel.encode()) == 2,
         "both server processes subscribed to the invalidation channel")
    # The second process reads the keys now and keeps them for an hour: only an announcement can change that.
    for below in (child, grandchild):
        assert requests.get(f"{second.base_url}/v1/models", headers=below.headers, timeout=10).status_code == 200
    revoke_key(first, parent)  # on the first process, with the user's dashboard token
    for below in (child, grandchild):
        refused = requests.get(f"{second.base_url}/v1/models", headers=below.headers, timeout=10)
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key", refused.text

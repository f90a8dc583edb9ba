"""The tokens agentsite issues end at once in every process of a deployment, on a real one: on SQLite, one
`serve` with its workers (the host's invalidation channel); on PostgreSQL + Redis, two `serve` hosts (Redis).
Every process keeps a token and its user for an hour (AGENTSITE_AUTH_CACHE_S), so only the announcement of the
change can stop a token a process has cached. Each test warms a token on one process, ends it through another
(or through manage.py, a process of its own), and sees the first refuse it, an open /mcp stream included.

Every answer names its process (AGENTSITE_WORKER_HEADER); requests go through keep-alive connections pinned to
each process. Every request names one Host (the first host's), as a load balancer keeps the Host its clients
used: the token's resource is `<that origin>/mcp` whichever host serves it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import requests
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.shared.exceptions import MCPError

from agentsite.server.serve import default_workers
from tests.accounts.test_stream_revocation import _FormFields
from tests.e2e import poll
from tests.server import ROOT, LiveServer, TwoHosts, two_hosts_possible

pytestmark = pytest.mark.e2e

HEADER = "X-Agentsite-Worker"
PASSWORD = "amber-lattice-orchard-4"
REDIRECT = "http://127.0.0.1:9/callback"
DEADLINE_S = 10.0
GATE_PLUGIN = '''
import os
import socket

from plugins.sdk import tool


@tool
def wait_for_gate(port: int) -> str:
    """Connect to the test's gate on 127.0.0.1:port, say which process runs this, and return once it answers."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(f"{os.getpid()}\\n".encode())
        return "released: " + sock.recv(1).decode()
'''
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "lifecycle", "version": "1"}}}


class Deployment:
    """The servers of one deployment, a keep-alive connection pinned to each of their processes, and the one
    Host every request names."""

    def __init__(self, servers: tuple[LiveServer, ...]) -> None:
        self.servers = servers
        self.host = urlsplit(servers[0].base_url).netloc
        self.pins: dict[int, tuple[LiveServer, requests.Session]] = {}
        for server in servers:
            poll(lambda server=server: self._pin_one_more(server) == default_workers(),
                 f"a connection to each worker of {server.base_url}", timeout=30, every=0)

    def _pin_one_more(self, server: LiveServer) -> int:
        pid, session = self.session_on(server)
        if pid in self.pins:
            session.close()
        else:
            self.pins[pid] = (server, session)
        return sum(1 for pinned, _ in self.pins.values() if pinned is server)

    def session_on(self, server: LiveServer) -> tuple[int, requests.Session]:
        """A new keep-alive connection to the server, and the process that took it."""
        session = requests.Session()
        session.headers["Host"] = self.host
        pid = int(session.get(f"{server.base_url}/api/health", timeout=20).headers[HEADER])
        return pid, session

    def pinned(self, pid: int) -> requests.Session:
        """A new session of its own (its cookies its own) on a connection that process `pid` took."""
        server = self.pins[pid][0]

        def found() -> requests.Session | None:
            got, session = self.session_on(server)
            if got == pid:
                return session
            session.close()
            return None

        return poll(found, f"a new connection taken by process {pid}", timeout=30, every=0)

    @property
    def processes(self) -> list[int]:
        return list(self.pins)

    def url(self, pid: int) -> str:
        return self.pins[pid][0].base_url

    def other_than(self, pid: int) -> int:
        """A process other than `pid`: on the other host when there are two."""
        host = self.pins[pid][0]
        others = [other for other, (server, _) in self.pins.items() if other != pid]
        return next((other for other in others if self.pins[other][0] is not host), others[0])

    def via(self, pid: int, method: str, path: str, *, session: requests.Session | None = None,
            **kwargs) -> requests.Response:
        """A request answered by process `pid`; fails if another process answered."""
        kwargs.setdefault("timeout", 30)
        session = session or self.pins[pid][1]
        response = session.request(method, f"{self.url(pid)}{path}", **kwargs)
        assert int(response.headers[HEADER]) == pid, f"{method} {path} was answered by another process than {pid}"
        return response


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> Iterator[Deployment]:
    plugins = tmp_path_factory.mktemp("plugins")
    (plugins / "gate.py").write_text(GATE_PLUGIN)
    env = {"AGENTSITE_WORKER_HEADER": "1", "AGENTSITE_LOGIN_RATE_LIMIT": "1000",
           "AGENTSITE_REGISTER_RATE_LIMIT": "1000", "AGENTSITE_OAUTH_REGISTER_RATE": "1000",
           "AGENTSITE_AUTH_CACHE_S": "3600", "AGENTSITE_SSE_KEEPALIVE_S": "0.2", "AGENTSITE_PLUGIN_WATCH": "0",
           "AGENTSITE_PLUGIN_DIR": str(plugins)}
    if two_hosts_possible():
        hosts = TwoHosts(env=env).start()
        servers, stop = hosts.hosts, hosts.stop
    else:  # SQLite is one host's database: the workers of one serve
        server = LiveServer(env=env).start()
        servers, stop = (server,), server.stop
    try:
        deployment = Deployment(servers)
        assert len(deployment.processes) >= 2, deployment.processes
        yield deployment
    finally:
        stop()


@dataclass
class User:
    id: int
    username: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@dataclass
class App:
    client_id: str
    access: str
    refresh: str


def new_user(deployment: Deployment, pid: int) -> User:
    answer = deployment.via(pid, "POST", "/api/auth/register",
                            json={"username": f"u-{secrets.token_hex(4)}", "password": PASSWORD})
    assert answer.status_code == 201, answer.text
    body = answer.json()
    return User(body["user"]["id"], body["user"]["username"], body["token"])


def connect(deployment: Deployment, user: User) -> App:
    """The whole flow, each step on the next process: registration, authorization, consent, the code's exchange."""
    steps = iter(deployment.processes * 2)
    registered = deployment.via(next(steps), "POST", "/oauth/register", json={
        "client_name": "Lifecycle", "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"]})
    assert registered.status_code == 201, registered.text
    client_id = registered.json()["client_id"]
    verifier = secrets.token_urlsafe(40)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    authorized = deployment.via(next(steps), "GET", "/oauth/authorize?" + urlencode({
        "response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT, "code_challenge": challenge,
        "code_challenge_method": "S256", "resource": f"http://{deployment.host}/mcp", "state": "s"}),
        allow_redirects=False)
    assert authorized.status_code == 302, authorized.text
    consent = authorized.headers["Location"].rsplit("/", 1)[1]
    decided = deployment.via(next(steps), "POST", f"/api/oauth/consents/{consent}", json={"allow": True},
                             headers=user.headers)
    assert decided.status_code == 200, decided.text
    code = parse_qs(urlsplit(decided.json()["redirect_to"]).query)["code"][0]
    exchanged = deployment.via(next(steps), "POST", "/oauth/token", data={
        "grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT, "code_verifier": verifier,
        "client_id": client_id})
    assert exchanged.status_code == 200, exchanged.text
    return App(client_id, exchanged.json()["access_token"], exchanged.json()["refresh_token"])


def mcp(deployment: Deployment, pid: int, access: str) -> requests.Response:
    return deployment.via(pid, "POST", "/mcp", json=INITIALIZE, headers={
        "Authorization": f"Bearer {access}", "Accept": "application/json, text/event-stream"})


# --- the ways a token ends, each made through process `pid` ------------------------------------------------

def _disconnect(deployment: Deployment, pid: int, user: User, app: App) -> None:
    answer = deployment.via(pid, "DELETE", f"/api/oauth/apps/{app.client_id}", headers=user.headers)
    assert answer.status_code == 204, answer.text


def _admin_headers(deployment: Deployment, pid: int) -> dict[str, str]:
    server = deployment.pins[pid][0]
    answer = deployment.via(pid, "POST", "/api/auth/login",
                            json={"username": "admin", "password": deployment.servers[0].admin_password})
    assert answer.status_code == 200, (answer.text, server.base_url)
    return {"Authorization": f"Bearer {answer.json()['token']}"}


def _admin_disconnect(deployment: Deployment, pid: int, user: User, app: App) -> None:
    answer = deployment.via(pid, "DELETE", f"/api/oauth/apps/{app.client_id}?user={user.id}",
                            headers=_admin_headers(deployment, pid))
    assert answer.status_code == 204, answer.text


def _oauth_revoke(deployment: Deployment, pid: int, user: User, app: App) -> None:
    answer = deployment.via(pid, "POST", "/oauth/revoke", data={"token": app.refresh, "client_id": app.client_id})
    assert answer.status_code == 200, answer.text


def _password_change(deployment: Deployment, pid: int, user: User, app: App) -> None:
    answer = deployment.via(pid, "POST", "/api/auth/change-password", headers=user.headers,
                            json={"old_password": PASSWORD, "new_password": PASSWORD + "-new"})
    assert answer.status_code == 200, answer.text


def _admin_site(deployment: Deployment, pid: int) -> requests.Session:
    """A Django admin sign-in on a connection process `pid` took."""
    session = deployment.pinned(pid)
    deployment.via(pid, "GET", "/admin/login/", session=session)
    answer = deployment.via(pid, "POST", "/admin/login/", session=session, allow_redirects=False, data={
        "username": "admin", "password": deployment.servers[0].admin_password, "next": "/admin/",
        "csrfmiddlewaretoken": session.cookies["csrftoken"]})
    assert answer.status_code == 302, answer.text[:500]
    return session


def _password_in_django_admin(deployment: Deployment, pid: int, user: User, app: App) -> None:
    session = _admin_site(deployment, pid)
    answer = deployment.via(pid, "POST", f"/admin/auth/user/{user.id}/password/", session=session,
                            allow_redirects=False, data={
                                "password1": PASSWORD + "-admin", "password2": PASSWORD + "-admin",
                                "usable_password": "true", "csrfmiddlewaretoken": session.cookies["csrftoken"]})
    assert answer.status_code == 302, answer.text[:2000]


def _deactivation_in_django_admin(deployment: Deployment, pid: int, user: User, app: App) -> None:
    session = _admin_site(deployment, pid)
    url = f"/admin/auth/user/{user.id}/change/"
    form = _FormFields()
    form.feed(deployment.via(pid, "GET", url, session=session).text)
    fields = {name: value for name, value in form.fields.items() if name != "is_active"}  # the box unticked
    fields["csrfmiddlewaretoken"] = session.cookies["csrftoken"]
    answer = deployment.via(pid, "POST", url, session=session, data=fields, allow_redirects=False)
    assert answer.status_code == 302, answer.text[:2000]


def _deletion_in_django_admin(deployment: Deployment, pid: int, user: User, app: App) -> None:
    session = _admin_site(deployment, pid)
    answer = deployment.via(pid, "POST", f"/admin/auth/user/{user.id}/delete/", session=session,
                            allow_redirects=False,
                            data={"post": "yes", "csrfmiddlewaretoken": session.cookies["csrftoken"]})
    assert answer.status_code == 302, answer.text[:500]


CHANGEPASSWORD = """
import django, sys
django.setup()
from django.contrib.auth.management.commands import changepassword
from django.core.management import call_command
changepassword.Command._get_pass = lambda self, prompt="": sys.argv[2]  # the prompt, answered
call_command("changepassword", sys.argv[1])
"""


def _manage_py_changepassword(deployment: Deployment, pid: int, user: User, app: App) -> None:
    """`manage.py changepassword` on the first host: a process of its own, which serves no request."""
    done = subprocess.run([sys.executable, "-c", CHANGEPASSWORD, user.username, PASSWORD + "-shell"], cwd=ROOT,
                          env=deployment.servers[0].env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


CHANGES: dict[str, Callable[[Deployment, int, User, App], None]] = {
    "disconnected by the user": _disconnect, "disconnected by an admin": _admin_disconnect,
    "revoked by the app": _oauth_revoke, "password changed": _password_change,
    "password changed in django admin": _password_in_django_admin,
    "password changed with manage.py": _manage_py_changepassword,
    "deactivated in django admin": _deactivation_in_django_admin, "deleted in django admin": _deletion_in_django_admin}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_token_cached_by_one_process_ends_at_once_when_another_ends_it(deployment, change):
    first = deployment.processes[0]
    other = deployment.other_than(first)
    user = new_user(deployment, first)
    app = connect(deployment, user)
    for _ in range(2):  # read once, then served from the first process's cache (an hour long)
        assert mcp(deployment, first, app.access).status_code == 200
    assert mcp(deployment, other, app.access).status_code == 200
    CHANGES[change](deployment, other, user, app)
    for pid in (first, other):
        refused = mcp(deployment, pid, app.access)
        assert refused.status_code == 401, (pid, refused.text)
        assert refused.json()["error"]["code"] == "token_invalid"
        assert 'error="invalid_token"' in refused.headers["WWW-Authenticate"]
    answer = deployment.via(first, "POST", "/oauth/token", data={
        "grant_type": "refresh_token", "refresh_token": app.refresh, "client_id": app.client_id})
    assert answer.status_code == 400 and answer.json()["error"] == "invalid_grant", answer.text


def test_a_disconnected_app_leaves_the_list_on_every_process(deployment):
    first = deployment.processes[0]
    other = deployment.other_than(first)
    user = new_user(deployment, first)
    app = connect(deployment, user)
    for pid in deployment.processes:
        listed = deployment.via(pid, "GET", "/api/oauth/apps", headers=user.headers).json()["results"]
        assert [entry["client_id"] for entry in listed] == [app.client_id]
    _disconnect(deployment, other, user, app)
    for pid in deployment.processes:
        assert deployment.via(pid, "GET", "/api/oauth/apps", headers=user.headers).json()["results"] == []


def test_last_use_at_mcp_shows_in_the_list(deployment):
    first = deployment.processes[0]
    user = new_user(deployment, first)
    app = connect(deployment, user)
    assert mcp(deployment, first, app.access).status_code == 200

    def used() -> str | None:
        listed = deployment.via(deployment.other_than(first), "GET", "/api/oauth/apps", headers=user.headers)
        return listed.json()["results"][0]["last_used_at"]

    poll(used, "the app's last use listed")


# --- an open /mcp stream ------------------------------------------------------------------------------------

class Gate:
    """A loopback socket the gate tool connects to: `pid` is the process running the tool once it entered,
    `release()` lets the tool return."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.entered = threading.Event()
        self.pid = 0
        self._connection: socket.socket | None = None
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self._connection, _ = self.listener.accept()
        self.pid = int(self._connection.makefile("rb").readline())
        self.entered.set()

    def release(self) -> None:
        assert self._connection is not None
        self._connection.sendall(b"x")
        self._connection.close()
        self.listener.close()


async def _call_through_the_gate(deployment: Deployment, path: str, access: str,
                                 change: Callable[[int], None]) -> object:
    """Call the gate tool with the token on whichever process takes the stream; while it runs, end the token
    through another process (`change(pid)`), then release the gate. Returns what the call raised or returned."""
    gate = Gate()
    headers = {"Authorization": f"Bearer {access}", "Host": deployment.host}
    url = f"{deployment.url(deployment.processes[-1])}{path}"
    transport = (sse_client(url, headers=headers) if path.endswith("/sse") else
                 _Streamable(url, create_mcp_http_client(headers=headers)))
    async with transport as streams, ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        call = asyncio.create_task(session.call_tool("wait_for_gate", {"port": gate.port}))
        assert await asyncio.to_thread(gate.entered.wait, DEADLINE_S), "the gate tool did not start"
        # The tool runs in the process whose stream carries its answer (a legacy SSE stream's messages are
        # relayed to it): the token is ended through another.
        assert gate.pid in deployment.processes, (gate.pid, deployment.processes)
        await asyncio.to_thread(change, deployment.other_than(gate.pid))
        gate.release()
        try:
            async with asyncio.timeout(DEADLINE_S):
                return await call
        except MCPError as exc:
            return exc


class _Streamable:
    def __init__(self, url: str, client) -> None:
        self.url, self.client = url, client

    async def __aenter__(self):
        await self.client.__aenter__()
        self._transport = streamable_http_client(self.url, http_client=self.client)
        read, write, *_ = await self._transport.__aenter__()
        return read, write

    async def __aexit__(self, *exc_info):
        try:
            await self._transport.__aexit__(*exc_info)
        finally:
            await self.client.__aexit__(*exc_info)


@pytest.mark.parametrize(("path", "change"), [("/mcp", "disconnected by the user"), ("/mcp/sse", "revoked by the app"),
                                              ("/mcp", "password changed")])
async def test_an_open_mcp_stream_ends_at_its_next_event_when_another_process_ends_its_token(deployment, path,
                                                                                           change):
    first = deployment.processes[0]
    user = await asyncio.to_thread(new_user, deployment, first)
    app = await asyncio.to_thread(connect, deployment, user)
    outcome = await _call_through_the_gate(deployment, path, app.access,
                                           lambda pid: CHANGES[change](deployment, pid, user, app))
    assert isinstance(outcome, MCPError), f"the call went on after the token ended: {outcome!r}"
    assert outcome.error.code == -32000 and outcome.error.data == {"code": "token_invalid"}


async def test_an_open_mcp_stream_goes_on_while_its_token_stands(deployment):
    first = deployment.processes[0]
    user = await asyncio.to_thread(new_user, deployment, first)
    app = await asyncio.to_thread(connect, deployment, user)
    outcome = await _call_through_the_gate(deployment, "/mcp", app.access, lambda pid: None)
    assert not isinstance(outcome, MCPError), outcome
    assert outcome.content[0].text == "released: x"

"""Where agentsite relies on more than a dependency's documented API, and what to re-check when it changes.

pyproject.toml caps daphne, Twisted, mcp, django-q2, asgiref, autobahn and drf-spectacular to the releases these
tests passed on. When one of them fails
after an upgrade, its message names the code to re-check; lift the cap only once it passes again.
"""

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client, override_settings
from twisted.internet import tcp
from twisted.internet.testing import StringTransport
from twisted.web import http

from agentsite.core.cors import origin_allowed

ROOT = Path(__file__).resolve().parents[2]
BODY_LIMIT_HOOK = ("agentsite/server/asgi_limits.py: install_daphne_body_limit (and the 413 tests under a real daphne "
                   "in tests/foundation/test_http.py)")

# daphne's WebRequest as daphne defines it, and after our hook: in a fresh interpreter, because the hook
# replaces the methods for the whole process.
_WEBREQUEST_FACTS = """
import inspect, json
from twisted.web import http
from daphne.http_protocol import WebRequest

HOOKED = {"WebRequest": ["gotLength", "handleContentChunk", "process", "handle_reply"],
          "HTTPChannel": ["_respondToBadRequestAndDisconnect", "connectionMade"]}
CLASSES = {"WebRequest": WebRequest, "HTTPChannel": http.HTTPChannel}

def describe(cls, name):
    function = getattr(cls, name, None)
    if function is None:
        return None
    owner = next(base.__name__ for base in cls.__mro__ if name in vars(base))
    return {"params": list(inspect.signature(function).parameters), "owner": owner}

facts = {"is_twisted_request": issubclass(WebRequest, http.Request),
         "original": {f"{cls}.{name}": describe(CLASSES[cls], name) for cls, names in HOOKED.items() for name in names}}
from agentsite.server.asgi_limits import install_daphne_body_limit
facts["installed"] = install_daphne_body_limit(1024)
facts["patched_by"] = {f"{cls}.{name}": getattr(CLASSES[cls], name).__module__
                       for cls, names in HOOKED.items() for name in names}
from twisted.internet.testing import StringTransport
class NoDelayRecorder(StringTransport):
    no_delay = None
    def setTcpNoDelay(self, enabled):
        self.no_delay = enabled
channel = http.HTTPChannel()
channel.timeOut = None
transport = NoDelayRecorder()
channel.makeConnection(transport)
facts["no_delay_on_connect"] = transport.no_delay
print(json.dumps(facts))
"""


@pytest.fixture(scope="module")
def webrequest_facts(tmp_path_factory) -> dict:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "agentsite.settings",
           "AGENTSITE_DATA_DIR": str(tmp_path_factory.mktemp("hooks"))}
    result = subprocess.run([sys.executable, "-c", _WEBREQUEST_FACTS], cwd=ROOT, capture_output=True, text=True,
                            timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.e2e
def test_daphne_and_twisted_still_have_the_methods_the_hooks_wrap(webrequest_facts):
    expected = {"WebRequest.gotLength": {"params": ["self", "length"], "owner": "Request"},
                "WebRequest.handleContentChunk": {"params": ["self", "data"], "owner": "Request"},
                "WebRequest.process": {"params": ["self"], "owner": "WebRequest"},
                "WebRequest.handle_reply": {"params": ["self", "message"], "owner": "WebRequest"},
                "HTTPChannel._respondToBadRequestAndDisconnect": {"params": ["self"], "owner": "HTTPChannel"},
                "HTTPChannel.connectionMade": {"params": ["self"], "owner": "HTTPChannel"}}
    assert webrequest_facts["is_twisted_request"], \
        f"daphne's WebRequest is no longer a Twisted Request: re-check {BODY_LIMIT_HOOK}"
    for name, shape in expected.items():
        assert webrequest_facts["original"][name] == shape, \
            f"{name} changed in daphne/Twisted ({webrequest_facts['original'][name]}, was {shape}): re-check " \
            f"{BODY_LIMIT_HOOK}"


@pytest.mark.e2e
def test_every_connection_daphne_accepts_has_nagle_off(webrequest_facts):
    """A streamed event must not wait for the ACK of the one before (Nagle): the hook on connectionMade turns
    TCP_NODELAY on through Twisted's transport."""
    assert callable(getattr(tcp.Server, "setTcpNoDelay", None)), \
        "twisted.internet.tcp.Server.setTcpNoDelay is gone: re-check connection_made in agentsite/server/asgi_limits.py"
    assert webrequest_facts["no_delay_on_connect"] is True


@pytest.mark.e2e
def test_the_hooks_replace_every_method_they_name(webrequest_facts):
    assert webrequest_facts["installed"] is True
    for name, module in webrequest_facts["patched_by"].items():
        assert module == "agentsite.server.asgi_limits", \
            f"{name} was not replaced by the hook: re-check {BODY_LIMIT_HOOK}"


class _RecordingRequest(http.Request):
    """Twisted's Request, noting the calls the hook relies on and what the channel holds at each."""

    calls: list

    def gotLength(self, length):
        self.calls.append(("gotLength", length, self.channel._path))
        super().gotLength(length)

    def handleContentChunk(self, data):
        self.calls.append(("handleContentChunk", data, self.channel._path))
        super().handleContentChunk(data)

    def process(self):
        self.calls.append(("process",))
        self.finish()


def _feed(raw: bytes) -> tuple[list, StringTransport]:
    calls: list = []
    channel = http.HTTPChannel()
    channel.timeOut = None  # no idle timer on the (not running) reactor
    channel.requestFactory = type("Recording", (_RecordingRequest,), {"calls": calls})
    transport = StringTransport()
    channel.makeConnection(transport)
    channel.dataReceived(raw)
    return calls, transport


@pytest.mark.parametrize(("raw", "expected"), [
    (b"POST /v1/x?y=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
     [("gotLength", 5, b"/v1/x?y=1"), ("handleContentChunk", b"hello", b"/v1/x?y=1"), ("process",)]),
    (b"POST /api/y HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
     [("gotLength", None, b"/api/y"), ("handleContentChunk", b"abc", b"/api/y"),
      ("handleContentChunk", b"de", b"/api/y"), ("process",)]),
])
def test_twisted_calls_the_wrapped_methods_in_order_with_the_path_on_the_channel(raw, expected):
    calls, _transport = _feed(raw)
    assert calls == expected, f"Twisted's HTTPChannel no longer calls gotLength, handleContentChunk, process in " \
                              f"this order, or no longer keeps the request path in channel._path: re-check " \
                              f"{BODY_LIMIT_HOOK} (its _refuse_in_daphne reads channel._path)"


def test_a_twisted_connection_can_still_be_written_to_and_cut_off():
    for method in ("write", "loseConnection", "abortConnection"):
        assert callable(getattr(tcp.Server, method, None)), \
            f"twisted.internet.tcp.Server.{method} is gone: re-check {BODY_LIMIT_HOOK}"


class _FormRequest(_RecordingRequest):
    parse_forms = True

    def gotLength(self, length):
        self._parsePOSTFormSubmission = self.parse_forms  # what the hook sets to False
        super().gotLength(length)


@pytest.mark.parametrize(("parse_forms", "expected"), [(True, "400"), (False, "processed")])
def test_twisted_still_parses_forms_only_while_parsepostformsubmission_is_set(parse_forms, expected):
    calls: list = []
    channel = http.HTTPChannel()
    channel.timeOut = None
    channel.requestFactory = type("Form", (_FormRequest,), {"calls": calls, "parse_forms": parse_forms})
    transport = StringTransport()
    channel.makeConnection(transport)
    channel.dataReceived(b"POST /api/x HTTP/1.1\r\nHost: a\r\nContent-Type: multipart/form-data\r\n"
                         b"Content-Length: 3\r\n\r\nabc")
    outcome = "processed" if ("process",) in calls else transport.value().split(b" ", 2)[1].decode()
    assert outcome == expected, \
        f"Twisted's Request._parsePOSTFormSubmission no longer switches its form parsing (got {outcome!r}): " \
        f"re-check {BODY_LIMIT_HOOK} (got_length sets it to False)"


def test_twisted_answers_a_malformed_request_line_through_the_hooked_method():
    answered: list = []
    def respond(self) -> None:
        answered.append(True)
        http.HTTPChannel._respondToBadRequestAndDisconnect(self)

    channel = type("Channel", (http.HTTPChannel,), {"_respondToBadRequestAndDisconnect": respond})()
    channel.timeOut = None
    channel.makeConnection(StringTransport())
    channel.dataReceived(b"NOT A VALID REQUEST LINE AT ALL\r\n\r\n")
    assert answered, "Twisted no longer answers a malformed request through HTTPChannel." \
                     f"_respondToBadRequestAndDisconnect: re-check {BODY_LIMIT_HOOK} (_install_daphne_headers)"


def test_the_mcp_http_client_factory_is_public_where_mcpbridge_imports_it():
    from mcp.client import streamable_http

    factory = getattr(streamable_http, "create_mcp_http_client", None)
    assert factory is not None, "mcp.client.streamable_http.create_mcp_http_client is gone: re-check " \
                                "mcpbridge/connection.py (_http_client)"
    assert list(inspect.signature(factory).parameters) == ["headers", "timeout", "auth"], \
        "create_mcp_http_client's parameters changed: re-check mcpbridge/connection.py (_http_client)"
    client = factory(headers={"X-Test": "1"})
    assert client.headers["X-Test"] == "1" and hasattr(client, "event_hooks"), \
        "create_mcp_http_client no longer returns an httpx-style client with event_hooks: re-check " \
        "mcpbridge/connection.py (_note_http_error)"


ORIGINS = ["http://localhost:5173", "https://127.0.0.1", "http://localhost", "http://localhost.evil.example",
           "https://evil.example", "https://app.example", "https://app.example:8443", "http://app.example", "null"]


@pytest.mark.parametrize("overrides", [
    {},
    {"CORS_ALLOWED_ORIGINS": ["https://app.example", "null"]},
    {"CORS_ALLOW_ALL_ORIGINS": True},
    {"CORS_ALLOWED_ORIGIN_REGEXES": [r"^https://app\.example(:\d+)?$"], "CORS_ALLOWED_ORIGINS": []},
], ids=["defaults", "listed", "all", "regex"])
def test_the_mcp_origin_check_agrees_with_the_apis_cors_middleware(overrides):
    client = Client()
    with override_settings(**overrides):
        for origin in ORIGINS:
            response = client.options("/api/health", headers={"origin": origin,
                                                               "access-control-request-method": "GET"})
            api_allows = response.headers.get("access-control-allow-origin") in (origin, "*")
            assert origin_allowed(origin) == api_allows, \
                f"{origin}: django-cors-headers says {api_allows}, agentsite.core.cors.origin_allowed disagrees " \
                f"(with {overrides}); /mcp uses origin_allowed, so align agentsite/core/cors.py with the middleware"


def test_twisted_still_buffers_a_write_until_dowrite_which_the_stream_flush_calls():
    """agentsite/server/asgi_limits.py `_flush` sends each streamed chunk at once by calling `doWrite`, relying on
    Twisted's FileDescriptor keeping written data in `_tempDataBuffer`/`dataBuffer` until then."""
    from types import SimpleNamespace

    from twisted.internet import abstract

    from agentsite.server.asgi_limits import _flush

    sent: list[bytes] = []

    class Socketless(abstract.FileDescriptor):
        connected = True

        def writeSomeData(self, data):  # noqa: N802 - Twisted's name
            sent.append(bytes(data))
            return len(data)

        def startWriting(self):  # noqa: N802
            pass

        def stopWriting(self):  # noqa: N802
            pass

    transport = Socketless(reactor=SimpleNamespace())
    transport.write(b"event one")
    assert sent == [], "Twisted wrote at once: _flush in agentsite/server/asgi_limits.py is no longer needed"
    assert transport._tempDataBuffer or transport.dataBuffer, "re-check _flush in agentsite/server/asgi_limits.py"
    _flush(SimpleNamespace(channel=SimpleNamespace(transport=transport)))
    assert b"".join(sent) == b"event one"
    _flush(SimpleNamespace(channel=SimpleNamespace(transport=transport)))  # nothing pending: nothing sent
    assert b"".join(sent) == b"event one"


def test_a_streamed_chunk_on_an_idle_transport_goes_out_without_registering_it_unless_the_socket_balks():
    """agentsite/server/asgi_limits.py's handle_reply sends a streamed chunk on an idle transport itself
    (`_send_now`), with the transport's `startWriting` shadowed while Twisted writes: it relies on
    FileDescriptor.write calling `self.startWriting` and doWrite returning None once all is sent. The socket is
    registered with the reactor only when it took part of the chunk, so the reactor sends the rest."""
    from types import SimpleNamespace

    from twisted.internet import abstract

    from agentsite.server.asgi_limits import _idle_transport, _not_yet, _send_now

    sent: list[bytes] = []
    registered: list[bool] = []
    room = [10**6]

    class Socketless(abstract.FileDescriptor):
        connected = True

        def writeSomeData(self, data):  # noqa: N802 - Twisted's name
            taken = bytes(data)[:room[0]]
            sent.append(taken)
            return len(taken)

        def startWriting(self):  # noqa: N802
            registered.append(True)

        def stopWriting(self):  # noqa: N802
            pass

    transport = Socketless(reactor=SimpleNamespace())
    request = SimpleNamespace(channel=SimpleNamespace(transport=transport))
    assert _idle_transport(request) is transport
    transport.startWriting = _not_yet
    transport.write(b"event one")
    del transport.startWriting
    _send_now(transport)
    assert (b"".join(sent), registered) == (b"event one", []), "re-check handle_reply in asgi_limits.py"
    room[0] = 3  # a full socket takes part: the rest waits for the reactor
    transport.startWriting = _not_yet
    transport.write(b"event two")
    del transport.startWriting
    _send_now(transport)
    assert registered == [True] and (transport._tempDataBuffer or transport.dataBuffer)
    assert _idle_transport(request) is None  # something pending: the next chunk takes the reactor's way


# --- django-q2, asgiref, autobahn, the reactor's shutdown trigger, drf-spectacular (capped in pyproject.toml) ---

def test_django_q2_still_has_what_taskqueue_rebuilds_async_tasks_packages_from():
    """agentsite/core/taskqueue.py builds async_task's packages itself (to queue many in one round trip) from
    django-q2's internals: the signer, the Conf flags async_task reads, and each broker's list. Re-check taskqueue.py
    (and tests/foundation/test_taskqueue.py, which compares its packages with async_task's) when this fails."""
    from django_q import tasks
    from django_q.brokers.orm import ORM
    from django_q.brokers.redis_broker import Redis
    from django_q.conf import Conf
    from django_q.models import OrmQ
    from django_q.signing import SignedPackage

    assert callable(SignedPackage.dumps) and callable(SignedPackage.loads)
    for flag in ("SYNC", "CACHED", "ACK_FAILURES", "ORM", "CLUSTER_NAME"):
        assert hasattr(Conf, flag), f"django_q.conf.Conf.{flag} is gone: re-check agentsite/core/taskqueue.py"
    assert {"key", "payload", "lock"} <= {field.name for field in OrmQ._meta.get_fields()}
    assert "list_key" in inspect.signature(ORM.__init__).parameters
    assert "list_key" in inspect.getsource(Redis)
    source = inspect.getsource(tasks.async_task)
    for key in ('"id"', '"name"', '"func"', '"args"', '"kwargs"', '"started"', '"cached"', '"ack_failure"',
                "pre_enqueue"):
        assert key in source.replace("'", '"'), (
            f"async_task no longer builds {key}: re-check the package agentsite/core/taskqueue.py builds")


def test_django_q2_orm_dequeue_is_still_what_the_sqlite_broker_repeats():
    """agentsite/core/qbroker.py's LocalORM.dequeue is django-q2's ORM.dequeue with the empty queue's sleep
    replaced by a wait on a wake socket, and get_broker builds it from Q_CLUSTER's broker_class. Re-check
    qbroker.py when this fails."""
    from django_q.brokers import get_broker
    from django_q.brokers.orm import ORM

    source = inspect.getsource(ORM.dequeue)
    for part in ("lock__lt=timezone.now()", "Conf.BULK", "update(lock=self.timeout(task))", "sleep(Conf.POLL)"):
        assert part in source, f"django-q2's ORM.dequeue changed ({part}): re-check agentsite/core/qbroker.py"
    assert "Conf.BROKER_CLASS" in inspect.getsource(get_broker)


def test_django_q2_sentinel_still_saves_its_status_while_it_waits_for_the_pusher():
    """agentsite/core/qbroker.py's LocalORM.set_stat wakes the pusher when the cluster's saved status is
    STOPPING: that works while Sentinel.stop tells the pusher to stop, then saves the status on each round of its
    wait for it. Re-check qbroker.py when this fails."""
    from django_q.cluster import Sentinel
    from django_q.pusher import pusher
    from django_q.status import Stat

    stop = inspect.getsource(Sentinel.stop)
    told, waits = stop.find("self.event_out.set()"), stop.find("while self.pusher.is_alive():")
    assert 0 <= told < waits, "Sentinel.stop no longer tells the pusher to stop before it waits for it"
    assert "Stat(self).save()" in stop[waits:waits + 120], "Sentinel.stop no longer saves the status as it waits"
    assert "self.broker.set_stat(" in inspect.getsource(Stat.save)
    assert "if event.is_set():" in inspect.getsource(pusher)


def test_asgiref_still_picks_a_sync_calls_thread_from_context_to_thread_executor():
    """agentsite/server/requestthreads.py lends each request a reused thread by putting it into asgiref's
    SyncToAsync.context_to_thread_executor for the request's ThreadSensitiveContext."""
    from asgiref.sync import SyncToAsync, ThreadSensitiveContext

    assert hasattr(SyncToAsync, "context_to_thread_executor"), "re-check agentsite/server/requestthreads.py"
    assert "context_to_thread_executor" in inspect.getsource(SyncToAsync.__call__), (
        "SyncToAsync.__call__ no longer reads context_to_thread_executor: re-check agentsite/server/requestthreads.py")
    assert hasattr(ThreadSensitiveContext, "__aenter__")


def test_autobahn_still_answers_a_refused_websocket_handshake_through_send_http_error_response():
    """agentsite/server/asgi_limits.py `_install_websocket_headers` wraps autobahn's sendHttpErrorResponse to add the
    security headers to a refused handshake, passing (code, reason, responseHeaders)."""
    from autobahn.websocket.protocol import WebSocketServerProtocol

    parameters = list(inspect.signature(WebSocketServerProtocol.sendHttpErrorResponse).parameters)
    assert parameters[:4] == ["self", "code", "reason", "responseHeaders"], (
        f"{parameters}: re-check _install_websocket_headers in agentsite/server/asgi_limits.py")
    assert "sendHttpErrorResponse" in inspect.getsource(WebSocketServerProtocol.failHandshake)


_SHUTDOWN_TRIGGER = """
import asyncio, django
from twisted.internet import asyncioreactor
asyncioreactor.install(asyncio.new_event_loop())  # as daphne's server does, before anything imports the reactor
django.setup()
from twisted.internet import reactor
from mcpbridge.asgi import on_server_shutdown
events = []
async def close():
    events.append("close started")
    await asyncio.sleep(0.05)  # the reactor must wait for this, not only start it
    events.append("close finished")
on_server_shutdown(close)
reactor.addSystemEventTrigger("during", "shutdown", lambda: events.append("shutdown"))
reactor.callLater(0, reactor.stop)
reactor.run()
print(events)
"""


@pytest.mark.e2e
def test_twisted_waits_for_the_before_shutdown_trigger_that_closes_mcp_sessions():
    """mcpbridge/asgi.py `on_server_shutdown` closes the MCP session manager in the reactor's "before shutdown"
    trigger, relying on Twisted waiting for the Deferred a trigger returns before it shuts down."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    result = subprocess.run([sys.executable, "-c", _SHUTDOWN_TRIGGER], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "['close started', 'close finished', 'shutdown']", (
        f"{result.stdout}: re-check on_server_shutdown in mcpbridge/asgi.py")


def test_drf_spectacular_documents_the_function_views_through_their_cls():
    """The async POST views (chat, workflow run) and /v1's function views are documented by setting `view.cls`
    (accounts/authentication/views.py async_post_view, compat/urls.py): drf-spectacular reads a route's
    operation from its view's `cls`. If this fails, the operations below vanished from /api/schema."""
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    for path in ("/api/sessions/{id}/chat", "/api/workflows/{id}/run", "/v1/chat/completions", "/v1/embeddings"):
        operation = schema["paths"].get(path, {}).get("post")
        assert operation and "requestBody" in operation, f"{path} lost its documented body: re-check view.cls"


def test_drf_spectacular_still_registers_components_as_compat_schema_does():
    """compat/schema.py's WireModelExtension documents /v1 from the pydantic models by registering each nested
    model as a ResolvedComponent in the AutoSchema's registry (drf-spectacular's own pydantic support does the
    same; neither is documented API)."""
    from drf_spectacular.plumbing import ComponentRegistry, ResolvedComponent

    parameters = list(inspect.signature(ResolvedComponent.__init__).parameters)
    assert {"name", "type", "object", "schema"} <= set(parameters), f"{parameters}: re-check compat/schema.py"
    assert ResolvedComponent.SCHEMA == "schemas"
    registry = ComponentRegistry()
    component = ResolvedComponent(name="Probe", type=ResolvedComponent.SCHEMA, object="Probe",
                                  schema={"type": "object"})
    registry.register_on_missing(component)
    assert component in registry and registry[component].schema == {"type": "object"}, "re-check compat/schema.py"


def test_twisted_ports_accept_one_connection_a_wake_under_the_daphne_worker(monkeypatch):
    """agentsite/server/daphne_worker.py `accept_one_at_a_time` relies on `tcp.Port.doRead` accepting
    `self.numberAccepts` connections a call: a real listening socket with three connections waiting gives
    three to Twisted's own loop, and one a call once the hook is in."""
    import socket
    from types import SimpleNamespace

    from twisted.internet import tcp

    from agentsite.server.daphne_worker import accept_one_at_a_time

    monkeypatch.setattr(tcp.Port, "numberAccepts", tcp.Port.__dict__.get("numberAccepts", 100), raising=False)

    def accepted_per_call(calls: int) -> list[int]:
        listener = socket.create_server(("127.0.0.1", 0))
        listener.setblocking(False)  # as Twisted's fd endpoint (daphne --fd) makes the socket it adopts
        built: list[object] = []
        factory = SimpleNamespace(doStart=lambda: None, doStop=lambda: None, buildProtocol=lambda addr: built.append(
            addr))  # None: the port closes the connection at once
        reactor = SimpleNamespace(addReader=lambda reader: None, removeReader=lambda reader: None)
        port = tcp.Port._fromListeningDescriptor(reactor, listener.fileno(), socket.AF_INET, factory)
        port.startListening()
        clients = [socket.create_connection(listener.getsockname()) for _ in range(3)]
        counts = []
        for _ in range(calls):
            before = len(built)
            port.doRead()
            counts.append(len(built) - before)
        for client in clients:
            client.close()
        port.socket.close()
        listener.close()
        return counts

    assert accepted_per_call(1) == [3], "re-check accept_one_at_a_time in agentsite/server/daphne_worker.py"
    accept_one_at_a_time()
    assert accepted_per_call(3) == [1, 1, 1]

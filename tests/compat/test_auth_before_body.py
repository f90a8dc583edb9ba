"""/v1 authenticates from the headers before a byte of the body is read (agentsite.core.bodygate, run by the
limits wrapper): a refused caller's body is never received, and its 401 is in the door's error shape; an accepted
caller reaches the app with the caller resolved once."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync

from accounts.tokens import token_pair_for
from agentsite.server.asgi_limits import LimitsMiddleware
from catalogue.services import config_update
from compat.http import CALLER_SCOPE_KEY

pytestmark = pytest.mark.django_db(transaction=True)


class _Recorder:
    """An ASGI app behind the wrapper, and the receive/send the server would give it."""

    def __init__(self) -> None:
        self.reads = 0
        self.app_scope: dict | None = None
        self.sent: list[dict] = []

    async def app(self, scope, receive, send) -> None:
        self.app_scope = scope
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def receive(self) -> dict:
        self.reads += 1
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(self, message: dict) -> None:
        self.sent.append(message)

    def status(self) -> int:
        return self.sent[0]["status"]

    def body(self) -> dict:
        return json.loads(b"".join(message.get("body", b"") for message in self.sent[1:]))

    def header(self, name: bytes) -> bytes | None:
        return dict(self.sent[0]["headers"]).get(name)


def _post(path: str, *headers: tuple[bytes, bytes], client: str = "127.0.0.1") -> _Recorder:
    recorder = _Recorder()
    scope = {"type": "http", "method": "POST", "path": path, "raw_path": path.encode(), "query_string": b"",
             "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                         (b"content-length", b"10000000"), *headers],
             "client": (client, 40000), "server": ("127.0.0.1", 8000), "scheme": "http", "http_version": "1.1"}
    async_to_sync(LimitsMiddleware(recorder.app))(scope, recorder.receive, recorder.send)
    return recorder


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/v1/embeddings", "/v1/messages",
                                  "/v1/messages/count_tokens"])
def test_an_unauthenticated_body_is_refused_without_reading_it(path):
    config_update(changes={"compat_auth": "key"})
    recorder = _post(path)
    assert recorder.status() == 401 and recorder.reads == 0 and recorder.app_scope is None
    assert recorder.header(b"connection") == b"close"  # the unread body cannot be followed by another request
    assert recorder.header(b"www-authenticate", ).startswith(b"Bearer")
    if path.startswith("/v1/messages"):
        assert recorder.body()["error"]["type"] == "authentication_error"
    else:
        assert recorder.body()["error"]["code"] == "invalid_api_key"


def test_a_dead_credential_and_a_remote_anonymous_caller_are_refused_without_reading_the_body():
    config_update(changes={"compat_auth": "local"})
    dead = _post("/v1/chat/completions", (b"authorization", b"Bearer ask-not-a-live-key"))
    remote = _post("/v1/chat/completions", client="203.0.113.9")
    for recorder in (dead, remote):
        assert recorder.status() == 401 and recorder.reads == 0 and recorder.app_scope is None


def test_an_accepted_caller_reaches_the_app_resolved_once(owner):
    config_update(changes={"compat_auth": "key"})
    token = token_pair_for(owner)["token"]
    recorder = _post("/v1/chat/completions", (b"authorization", f"Bearer {token}".encode()))
    assert recorder.status() == 204 and recorder.reads == 1
    user, key, credential = recorder.app_scope[CALLER_SCOPE_KEY]
    assert user.pk == owner.pk and key is None and credential is not None


def test_paths_outside_v1_and_reads_are_not_gated():
    config_update(changes={"compat_auth": "key"})
    assert _post("/api/auth/login").status() == 204

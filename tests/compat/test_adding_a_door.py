"""docs/architecture.md "Adding things", a door: the toy dialect of tests/compat/toydoor/, made by the seven "Doors"
steps, is put in compat.doors.DOORS and served by compat/urls.py as every door is. Requests go through the ASGI
stack the server runs (the limits wrapper and its /v1 body gate, then Django) to the offline model: a whole reply,
a stream rendered by compat.stream.drive with the toy Renderer, an API key accepted, a missing credential refused
in the toy error shape (before the view by the body gate, and by the view itself), a bad body in that shape."""

from __future__ import annotations

import asyncio
import importlib
import json

import pytest
from django.core.handlers.asgi import ASGIHandler
from django.urls import resolve, reverse
from drf_spectacular.generators import SchemaGenerator

import compat.urls
from accounts.services import key_create
from agentsite.core import errors
from agentsite.core.dbcall import db
from agentsite.server import asgi_limits
from catalogue.services import config_update
from compat import doors
from tests.compat.toydoor import routes as toy_routes
from tests.compat.toydoor import schema as toy_schema

pytestmark = pytest.mark.django_db(transaction=True)

TOY = "tests.compat.toydoor"
PATH = "/v1/toy/say"
MODEL = "default/offline"  # answers without an upstream


def _served(settings, *, shaped: bool):
    """Step 7: one line in DOORS; compat/urls.py, imported anew, serves it, and the doors' error shapes are
    installed as compat/apps.py does at start-up (both undone after)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(doors, "DOORS", (*doors.DOORS, TOY))
        patch.setattr(errors, "_SHAPES", list(errors._SHAPES))
        if not shaped:
            patch.setattr(toy_routes, "ERROR_SHAPE", None)
        doors.install_error_shapes()
        importlib.reload(compat.urls)
        settings.ROOT_URLCONF = "tests.compat.toydoor.urls"
        yield
    importlib.reload(compat.urls)


@pytest.fixture
def toy_door(settings):
    yield from _served(settings, shaped=True)


@pytest.fixture
def unshaped_toy_door(settings):
    """The toy without its ERROR_SHAPE: what is refused before its view takes /v1's shape, OpenAI's."""
    yield from _served(settings, shaped=False)


class _Exchange:
    """One request through the server's ASGI stack: the limits wrapper (its body gate), then Django."""

    def __init__(self) -> None:
        self.sent: list[dict] = []

    async def post(self, body: dict, *headers: tuple[bytes, bytes]) -> _Exchange:
        raw = json.dumps(body).encode()
        scope = {"type": "http", "method": "POST", "path": PATH, "raw_path": PATH.encode(), "query_string": b"",
                 "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                             (b"content-length", str(len(raw)).encode()), *headers],
                 "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 8000), "scheme": "http",
                 "http_version": "1.1"}
        messages = [{"type": "http.request", "body": raw, "more_body": False}]

        async def receive() -> dict:
            if not messages:  # the client stays: Django ends a response whose client left
                await asyncio.Event().wait()
            return messages.pop(0)

        async def send(message: dict) -> None:
            self.sent.append(message)

        await asgi_limits.LimitsMiddleware(ASGIHandler())(scope, receive, send)
        return self

    @property
    def status(self) -> int:
        return self.sent[0]["status"]

    @property
    def content(self) -> bytes:
        return b"".join(message.get("body", b"") for message in self.sent[1:])

    def json(self) -> dict:
        return json.loads(self.content)


def _events(content: bytes) -> list[tuple[str, dict]]:
    events = []
    for block in content.decode().strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((fields["event"], json.loads(fields["data"])))
    return events


async def _api_key(owner) -> tuple[bytes, bytes]:
    _, secret = await db(key_create, user=owner, name="toy", scopes=["v1"])
    return b"authorization", f"Bearer {secret}".encode()


def test_the_toy_door_is_routed_and_documented_through_the_registry(toy_door):
    assert reverse("v1-toy-say") == PATH and toy_routes.ROUTES[0] in doors.routes()
    assert resolve(PATH).func.cls is toy_schema.ToySaySchema  # compat/urls.py attached its schema-only view
    schema = SchemaGenerator().get_schema(request=None, public=True)
    body = schema["paths"][PATH]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/ToySayRequest"}
    assert set(schema["components"]["schemas"]["ToySayRequest"]["properties"]) == {"model", "say", "stream"}
    refusal = schema["paths"][PATH]["post"]["responses"]["400"]["content"]["application/json"]["schema"]
    assert refusal == {"$ref": "#/components/schemas/ToyError"}  # its ERROR_SHAPE documents its errors


async def test_a_whole_reply_for_an_api_key(toy_door, owner):
    await db(config_update, changes={"compat_auth": "key"})
    reply = await _Exchange().post({"model": MODEL, "say": "hello toy"}, await _api_key(owner))
    assert reply.status == 200, reply.content
    body = reply.json()
    assert body["toy"] == "reply" and body["model"] == MODEL and body["finish"] == "stop" and body["text"]


async def test_a_stream_through_the_toy_renderer(toy_door, owner):
    await db(config_update, changes={"compat_auth": "key"})
    reply = await _Exchange().post({"model": MODEL, "say": "hello toy", "stream": True}, await _api_key(owner))
    assert reply.status == 200, reply.content
    events = _events(reply.content)
    assert events[-1] == ("done", {"finish": "stop"}), events
    pieces = [data["text"] for name, data in events[:-1] if name == "piece"]
    assert pieces and len(pieces) == len(events) - 1, events
    whole = await _Exchange().post({"model": MODEL, "say": "hello toy"}, await _api_key(owner))
    assert "".join(pieces) == whole.json()["text"]


async def test_a_missing_credential_is_refused_in_the_toy_shape_before_the_body(toy_door):
    await db(config_update, changes={"compat_auth": "key"})
    refused = await _Exchange().post({"model": MODEL, "say": "hello"})
    assert refused.status == 401
    assert refused.json()["toy_error"]["code"] == "invalid_api_key", refused.json()
    bad_key = await _Exchange().post({"model": MODEL, "say": "hello"}, (b"x-api-key", b"ask-" + b"x" * 43))
    assert bad_key.status == 401 and bad_key.json()["toy_error"]["code"] == "invalid_api_key"


async def test_without_its_error_shape_the_body_gate_answers_in_openai_shape(unshaped_toy_door):
    await db(config_update, changes={"compat_auth": "key"})
    refused = await _Exchange().post({"model": MODEL, "say": "hello"})
    assert refused.status == 401 and refused.json()["error"]["code"] == "invalid_api_key"


def test_the_view_resolves_the_caller_through_compat_http_when_no_gate_did(toy_door, client):
    config_update(changes={"compat_auth": "key"})  # Django's test client runs no body gate: the view resolves
    response = client.post(PATH, {"model": MODEL, "say": "hello"}, content_type="application/json")
    assert response.status_code == 401 and response.json()["toy_error"]["code"] == "invalid_api_key"


async def test_a_bad_body_is_refused_in_the_toy_shape_naming_the_field(toy_door, owner):
    await db(config_update, changes={"compat_auth": "key"})
    key = await _api_key(owner)
    wrong = await _Exchange().post({"model": MODEL, "say": 3}, key)
    assert wrong.status == 400 and wrong.json()["toy_error"]["message"].startswith("say:"), wrong.content
    unknown = await _Exchange().post({"model": "no-such-model", "say": "hi"}, key)
    assert unknown.status == 404 and unknown.json()["toy_error"]["code"] == "model_not_found"

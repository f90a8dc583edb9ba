"""Fixtures for the security tests: every HTTP route the server answers, found from its own configuration
(the URL conf and the ASGI mounts), so that a route added later is tested without anyone listing it."""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from dataclasses import dataclass
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from asgiref.sync import async_to_sync
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

# Every method a client can send that a view could answer; HEAD and OPTIONS included, since Django answers
# HEAD with the GET handler and DRF answers OPTIONS itself.
HTTP_METHODS = ("get", "post", "put", "patch", "delete", "head", "options")
API_PREFIXES = ("/api/", "/v1/", "/oauth/", "/.well-known/")


@dataclass(frozen=True)
class Route:
    """One URL pattern: its template with `{name}` for each path parameter, and the view that serves it."""

    template: str
    callback: object
    parameters: tuple[str, ...]

    @property
    def view_class(self) -> type | None:
        # Class-based views (DRF's included) carry `view_class`; function views may carry a `cls` that only
        # documents them for the schema, which says nothing about what they answer: not used here.
        return getattr(self.callback, "view_class", None)

    def path(self, **values: str) -> str:
        return self.template.format(**values)


_REGEX_GROUP = re.compile(r"\(\?P<(\w+)>[^)]*\)")
_ROUTE_PARAMETER = re.compile(r"<(?:\w+:)?(\w+)>")


def _pattern_text(pattern) -> str:
    """A pattern as a template piece: `<uuid:pk>` and `(?P<pk>...)` both become `{pk}`."""
    text = str(pattern)
    if text.startswith("^") or text.endswith("$") or "(?P<" in text:  # a re_path
        text = _REGEX_GROUP.sub(lambda match: "{" + match.group(1) + "}", text.lstrip("^").rstrip("$"))
        text = text.replace("\\", "")
    return _ROUTE_PARAMETER.sub(lambda match: "{" + match.group(1) + "}", text)


def _walk(patterns, prefix: str = ""):
    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from _walk(entry.url_patterns, prefix + _pattern_text(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield prefix + _pattern_text(entry.pattern), entry.callback


def url_routes(prefixes: tuple[str, ...] = API_PREFIXES) -> list[Route]:
    """Every route of the URL conf whose path starts with one of prefixes, in URL-conf order."""
    found = []
    for template, callback in _walk(get_resolver().url_patterns):
        template = "/" + template
        if template.startswith(prefixes) or template + "/" in prefixes:
            found.append(Route(template, callback, tuple(re.findall(r"{(\w+)}", template))))
    return found


def asgi_mounts() -> list[str]:
    """The path prefixes of the ASGI apps mounted next to Django (agentsite.core.mounts.MOUNTS)."""
    from agentsite.core.mounts import MOUNTS

    return [prefix for prefix, _factory in MOUNTS]


@pytest.fixture(scope="session")
def api_routes() -> list[Route]:
    """Every /api and /v1 route of the URL conf."""
    return url_routes()


WORKFLOW_NODES = [{"id": "in", "name": "in", "type": "input", "config": {}},
                  {"id": "out", "name": "out", "type": "output", "config": {"outputFormat": "text"}}]
WORKFLOW_EDGES = [{"from": "in", "to": "out"}]


def _created(response, what: str) -> dict:
    assert response.status_code in (200, 201, 202), f"making {what}: {response.status_code} {response.content[:300]!r}"
    return response.json()


def stream_text(response) -> str:
    """The whole body of a streamed (SSE) response from the test client (async views stream asynchronously)."""
    if not response.is_async:
        return b"".join(response.streaming_content).decode()

    async def read() -> bytes:
        return b"".join([chunk async for chunk in response.streaming_content])

    return async_to_sync(read)().decode()


def objects_made_through_the_api(client, *, label: str = "mine") -> dict[str, str]:
    """One object of every kind a user owns, made through the API by `client`: {kind: id}.

    The session holds one chat turn (so it has messages), the task one manual run, the workflow one run, and
    a second workflow one run waiting for the user's approval.
    """
    session = _created(client.post("/api/sessions", {"name": f"{label} chat"}, format="json"), "a session")["id"]
    chat = client.post(f"/api/sessions/{session}/chat", {"message": f"hello from {label}"}, format="json")
    chat_text = stream_text(chat) if chat.status_code == 200 else ""
    assert "event: done" in chat_text, "the chat turn did not finish"
    reply = re.search(r'"message_id": ?"([0-9a-f-]{36})"', chat_text).group(1)
    document = _created(client.post("/api/kb/documents", {"filename": f"{label}.md", "content": f"{label}'s notes "
                                                          "about the orchard and its pear trees."}, format="json"),
                        "a document")["id"]
    upload = _created(client.post("/api/upload", {"filename": f"{label}.txt", "content_base64": base64.b64encode(
        f"{label}'s file".encode()).decode()}, format="json"), "an upload")["id"]
    workflow = _created(client.post("/api/workflows", {"name": label, "nodes": WORKFLOW_NODES,
                                                       "edges": WORKFLOW_EDGES}, format="json"), "a workflow")["id"]
    workflow_run = _created(client.post(f"/api/workflows/{workflow}/run", {"input": label}, format="json"),
                            "a workflow run")["id"]
    task = _created(client.post("/api/scheduler/tasks", {"name": label, "cron": "0 9 * * *", "prompt": "hello",
                                                         "session_id": session}, format="json"), "a task")["id"]
    task_run = _created(client.post(f"/api/scheduler/run/{task}"), "a scheduled task's run")["id"]
    key = str(_created(client.post("/api/keys", {"name": f"{label}'s key"}, format="json"), "an API key")["id"])
    stored = client.post("/v1/responses", {"model": "agent", "input": "hello"}, format="json")
    assert stored.status_code == 200, f"a stored response: {stored.status_code} {stored.content[:300]!r}"
    gated = _created(client.post("/api/workflows", {"name": f"{label}-gated", "nodes": [
        {"id": "in", "type": "input", "name": "in", "config": {}},
        {"id": "ask", "type": "approval", "name": "ask", "config": {"prompt": f"{label}'s question"}}],
        "edges": [{"from": "in", "to": "ask"}]}, format="json"), "a workflow with an approval")["id"]
    waiting = client.post(f"/api/workflows/{gated}/run", {"input": label}, format="json").json()
    assert waiting["status"] == "waiting", waiting
    approval = client.get("/api/approvals").json()["results"][0]["id"]
    trigger = _created(client.post(f"/api/workflows/{workflow}/triggers", {}, format="json"), "a trigger")["id"]
    collection = _created(client.post("/api/kb/collections", {"name": f"{label} handbook"}, format="json"),
                          "a collection")["id"]
    _created(client.post("/api/kb/documents", {"collection": collection, "filename": f"{label}-shared.md",
                                               "content": f"{label}'s handbook on the orchard's pear trees."},
                         format="json"), "a document in the collection")
    slug = re.sub(r"[^a-z0-9_-]", "-", label.lower())[:50] + "-agent"
    agent = _created(client.post("/api/agents", {"slug": slug, "name": f"{label}'s agent", "instructions":
                                                 f"Answer as {label}'s helper."}, format="json"), "an agent")["id"]
    connected_app = connected_app_made_through_the_api(client)
    return {"agent": str(agent), "agent_version": "1", "connected_app": connected_app,
            "collection": collection, "session": session, "message": reply, "document": document, "upload": upload,
            "workflow": workflow,
            "workflow_run": workflow_run, "task": task, "task_run": task_run, "key": key,
            "response": stored.json()["id"], "approval": approval, "workflow_version": "1", "trigger": trigger}


MATRIX_REDIRECT_URI = "http://127.0.0.1:9/callback"


def connected_app_made_through_the_api(client) -> str:
    """An app connected to `client`'s user by the OAuth flow (a registered client, the authorization request, the
    user's consent, the code exchanged for tokens): its client_id. One client serves every grant of a test (the
    registration is rate-limited per address)."""
    from oauth.models import Client  # a model: after the app registry is ready

    registered = Client.objects.filter(name="matrix connector").first()
    if registered is None:
        registration = APIClient().post("/oauth/register", {
            "client_name": "matrix connector", "redirect_uris": [MATRIX_REDIRECT_URI],
            "token_endpoint_auth_method": "none", "grant_types": ["authorization_code", "refresh_token"]},
            format="json")
        client_id = _created(registration, "an OAuth client")["client_id"]
    else:
        client_id = registered.client_id
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    resource = "http://testserver/mcp"
    authorize = APIClient().get("/oauth/authorize?" + urlencode({
        "response_type": "code", "client_id": client_id, "redirect_uri": MATRIX_REDIRECT_URI, "state": "matrix",
        "code_challenge": challenge, "code_challenge_method": "S256", "resource": resource}))
    assert authorize.status_code == 302, f"authorizing: {authorize.status_code} {authorize.content[:300]!r}"
    consent = authorize["Location"].rsplit("/", 1)[1]
    redirect = _created(client.post(f"/api/oauth/consents/{consent}", {"allow": True}, format="json"),
                        "a consent")["redirect_to"]
    code = parse_qs(urlsplit(redirect).query)["code"][0]
    token = APIClient().post("/oauth/token", urlencode({
        "grant_type": "authorization_code", "code": code, "redirect_uri": MATRIX_REDIRECT_URI,
        "code_verifier": verifier, "client_id": client_id, "resource": resource}),
        content_type="application/x-www-form-urlencoded")
    assert token.status_code == 200, f"the token: {token.status_code} {token.content[:300]!r}"
    return client_id


@pytest.fixture
def owner_objects(owner_client) -> dict[str, str]:
    """The `owner` user's objects of every kind, made through the API."""
    return objects_made_through_the_api(owner_client)

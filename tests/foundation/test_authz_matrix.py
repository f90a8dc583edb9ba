"""An authorisation matrix generated from the URL configuration (issue 15, item 4).

Every route under /api and /v1, with every method its view answers, is found by walking the URL conf, so a
route added later is in the matrix without anyone listing it:

- every route that is not on the short PUBLIC list answers 401, in its path's error envelope, to no token, a
  malformed one, another scheme, an expired one, one signed with another key, `alg=none`, a refresh token
  used as access, and one issued before a password change (/v1 with `compat_auth: "token"`);
- every admin operation (found from the views' own permission classes) answers 403 to a user's valid token;
- every route that names an object (a path parameter, or scheduler history's `task`) answers 404 to another
  user's object, for every method, and the owner's objects are unchanged afterwards. A new object route
  with no object to try fails here until OBJECT_ROUTES says what it names.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from datetime import timedelta
from types import SimpleNamespace

import jwt
import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.permissions import IsAdminUser
from rest_framework.test import APIClient
from rest_framework_simplejwt.tokens import AccessToken, RefreshToken

from accounts.api import IsAdmin
from accounts.services import config_update
from accounts.tokens import PASSWORD_CLAIM, password_version, token_pair_for

pytestmark = pytest.mark.django_db(transaction=True)

METHODS = ("get", "post", "put", "patch", "delete")
# (method, path template) anyone may call. Each needs a reason: docs/api.md names them public.
PUBLIC = {
    ("post", "/api/auth/login"), ("post", "/api/auth/register"), ("post", "/api/auth/refresh"),  # how tokens start
    ("get", "/api/auth/options"),  # what the log-in form offers (is registration open?) before a token exists
    ("get", "/api/health"),  # probes
    ("get", "/api/schema"), ("get", "/api/docs"),  # the contract itself
    ("get", "/api/voices"),  # the preset list, static
}
# Served without a credential while compat_auth is "public" (and from loopback while "local", the default).
V1_PUBLIC_WHILE_COMPAT_PUBLIC = {("get", "/v1/models"), ("post", "/v1/chat/completions"), ("post", "/v1/embeddings"),
                                  ("post", "/v1/responses")}
# Which object a path parameter names, by the route's template.
OBJECT_ROUTES = {
    "/api/sessions/{pk}": "session", "/api/sessions/{pk}/messages": "session",
    "/api/sessions/{pk}/rename": "session", "/api/sessions/{pk}/chat": "session",
    "/api/kb/documents/{pk}": "document",
    "/api/uploads/{pk}": "upload",
    "/api/scheduler/tasks/{pk}": "task", "/api/scheduler/run/{pk}": "task",
    "/api/workflows/{pk}": "workflow", "/api/workflows/{pk}/nodes": "workflow", "/api/workflows/{pk}/run": "workflow",
    "/api/workflows/{pk}/runs": "workflow", "/api/workflows/{pk}/export": "workflow",
    "/api/workflows/{pk}/versions": "workflow", "/api/workflows/{pk}/versions/{number}": "workflow",
    "/api/workflows/{pk}/versions/{number}/restore": "workflow",
    "/api/workflows/{pk}/triggers": "workflow", "/api/workflows/{pk}/triggers/{trigger_id}": "workflow",
    "/api/workflows/{pk}/triggers/{trigger_id}/rotate": "workflow",
    "/api/workflows/runs/{run_id}": "workflow_run",
    "/api/approvals/{approval_id}": "approval",
    "/api/keys/{pk}": "key",
    "/v1/responses/{pk}": "response", "/v1/responses/{pk}/input_items": "response",
}
# Routes naming an object that is not a user's but the admins' (an MCP server): admin-only, so another user
# gets the 403 the admin matrix checks, and there is no owner to hide it from.
ADMIN_OBJECT_ROUTES = {"/api/mcp/servers/{name}", "/api/connections/{connection_id}",
                       "/api/connections/{connection_id}/discover", "/api/aliases/{alias_id}", "/api/users/{user_id}",
                       "/api/users/{user_id}/budget"}
# Routes whose parameter names no one's object but a name every caller shares (a catalogue model's id).
SHARED_NAME_ROUTES = {"/v1/models/{model_id}"}
# A valid body where a route checks its body before its object: the answer to another user must still be 404.
VALID_BODIES = {
    ("post", "/api/sessions/{pk}/chat"): {"message": "hello"},
    ("put", "/api/sessions/{pk}/rename"): {"name": "renamed"},
    ("put", "/api/scheduler/tasks/{pk}"): {"name": "renamed"},
    ("patch", "/api/scheduler/tasks/{pk}"): {"name": "renamed"},
    ("post", "/api/workflows/{pk}/run"): {"input": "x"},
    ("post", "/api/workflows/{pk}/nodes"): {"id": "extra", "name": "extra", "type": "delay", "config": {"ms": 0}},
    ("put", "/api/workflows/{pk}"): {"name": "renamed", "nodes": [
        {"id": "in", "name": "in", "type": "input", "config": {}},
        {"id": "out", "name": "out", "type": "output", "config": {}}], "edges": [{"from": "in", "to": "out"}]},
    ("patch", "/api/workflows/{pk}"): {"name": "renamed"},
    ("post", "/api/approvals/{approval_id}"): {"decision": "approve"},
}
# Objects named by a query parameter instead: (method, path, parameter, kind).
OBJECT_QUERIES = [("get", "/api/scheduler/history", "task", "task")]


def _walk(patterns, prefix=""):
    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from _walk(entry.url_patterns, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern), entry.callback


def _template(route: str) -> str:
    parts = []
    for part in route.split("/"):
        if part.startswith("<") and part.endswith(">"):
            part = "{" + part[1:-1].split(":")[-1] + "}"
        parts.append(part)
    return "/" + "/".join(parts)


def _methods(callback) -> list[str]:
    cls = getattr(callback, "view_class", None) or getattr(callback, "cls", None)
    if cls is not None and hasattr(cls, "http_method_names"):
        handlers = [method for method in METHODS if hasattr(cls, method)]
        if handlers:
            return handlers
    return list(METHODS)  # a function view: try them all; a 405 means "not this method"


def _view_class(callback):
    return getattr(callback, "view_class", None)


def routes() -> list[tuple[str, str, object]]:
    """(method, path template, callback) for every /api and /v1 route."""
    found = []
    for route, callback in _walk(get_resolver().url_patterns):
        template = _template(route)
        if template.startswith(("/api", "/v1")):
            found.extend((method, template, callback) for method in _methods(callback))
    return found


def is_admin_operation(method: str, callback) -> bool:
    cls = _view_class(callback)
    if cls is None:
        return False
    view = cls()
    view.request, view.format_kwarg, view.args, view.kwargs = SimpleNamespace(method=method.upper()), None, (), {}
    admin_classes = (IsAdmin, IsAdminUser)  # a tuple: DRF permission classes overload `|`
    return any(isinstance(permission, admin_classes) for permission in view.get_permissions())


def _fill(template: str) -> str:
    return (template.replace("{pk}", str(uuid.uuid4())).replace("{run_id}", str(uuid.uuid4()))
            .replace("{approval_id}", str(uuid.uuid4())).replace("{connection_id}", "1").replace("{alias_id}", "1")
            .replace("{user_id}", "1").replace("{number}", "1").replace("{trigger_id}", str(uuid.uuid4())))


def _call(client: APIClient, method: str, path: str, headers: dict | None = None, body: dict | None = None):
    return getattr(client, method)(path, body if body is not None else ({} if method != "get" else None),
                                   format="json", **(headers or {}))


def _bearer(token: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def _unsigned(payload: dict) -> str:
    def part(data: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(payload)}."


@pytest.fixture
def bad_credentials(owner, django_user_model):
    """Each kind of credential that must not get past authentication, as request headers."""
    from django.conf import settings

    access = AccessToken.for_user(owner)
    access[PASSWORD_CLAIM] = password_version(owner)
    claims = dict(access.payload)
    expired = AccessToken.for_user(owner)
    expired[PASSWORD_CLAIM] = password_version(owner)
    expired.set_exp(from_time=expired.current_time - timedelta(hours=2), lifetime=timedelta(hours=1))
    refresh = RefreshToken.for_user(owner)
    refresh[PASSWORD_CLAIM] = password_version(owner)
    changer = django_user_model.objects.create_user(username="changer", password="correct-horse-battery-9")
    before_change = token_pair_for(changer)["token"]
    changer.set_password("another-horse-battery-7")
    changer.save()
    assert jwt.decode(str(access), settings.SIMPLE_JWT["SIGNING_KEY"], algorithms=["HS256"])  # the real key signs
    return {
        "no token": {},
        "malformed": {"HTTP_AUTHORIZATION": "Bearer not-a.jwt.at-all"},
        "another scheme": {"HTTP_AUTHORIZATION": "Basic " + base64.b64encode(b"owner:pw").decode()},
        "empty bearer": {"HTTP_AUTHORIZATION": "Bearer "},
        "expired": _bearer(str(expired)),
        "another key": _bearer(jwt.encode(claims, "not-the-server-key-" + "x" * 32, algorithm="HS256")),
        "alg none": _bearer(_unsigned(claims)),
        "refresh as access": _bearer(str(refresh)),
        "before a password change": _bearer(before_change),
    }


def _assert_envelope_401(response, method: str, template: str, kind: str) -> None:
    where = f"{method.upper()} {template} with {kind}"
    assert response.status_code == 401, f"{where}: {response.status_code} {response.content[:300]!r}"
    error = response.json()["error"]
    if template.startswith("/v1/messages"):  # Anthropic's shape: {"type": "error", "error": {type, message}}
        assert response.json()["type"] == "error" and error["type"] == "authentication_error", where
    elif template.startswith("/v1"):
        assert {"message", "type", "code"} <= set(error), where
    else:
        assert {"code", "message", "details"} <= set(error), where


def test_the_matrix_covers_the_whole_api():
    found = routes()
    templates = {template for _method, template, _callback in found}
    assert len(found) >= 60 and len(templates) >= 40, sorted(templates)
    # Every route that names an object says which (so the 404 matrix below cannot skip one).
    for template in templates:
        if "{" in template:
            assert template in OBJECT_ROUTES or template in ADMIN_OBJECT_ROUTES or template in SHARED_NAME_ROUTES, (
                f"{template} names an object: add it to OBJECT_ROUTES")
    for method, template in PUBLIC | V1_PUBLIC_WHILE_COMPAT_PUBLIC:
        assert (method, template) in {(m, t) for m, t, _c in found}, f"{method} {template} is gone: update PUBLIC"


def test_every_non_public_route_refuses_every_bad_token_with_a_401(bad_credentials):
    config_update(changes={"compat_auth": "token"})
    client = APIClient()
    checked = 0
    for method, template, _callback in routes():
        if (method, template) in PUBLIC:
            continue
        path = _fill(template)
        for kind, headers in bad_credentials.items():
            response = _call(client, method, path, headers)
            if response.status_code == 405 and kind == "no token":
                break  # the view does not answer this method at all (a function view tried with every method)
            _assert_envelope_401(response, method, template, kind)
            checked += 1
    assert checked >= 400


def test_v1_is_public_only_while_compat_auth_says_so(bad_credentials):
    config_update(changes={"compat_auth": "public"})
    client = APIClient()
    for method, template in sorted(V1_PUBLIC_WHILE_COMPAT_PUBLIC):
        assert _call(client, method, template).status_code != 401, f"{method} {template} while public"
    config_update(changes={"compat_auth": "token"})
    for method, template in sorted(V1_PUBLIC_WHILE_COMPAT_PUBLIC):
        _assert_envelope_401(_call(client, method, template), method, template, "no token (compat_auth token)")


def test_every_admin_operation_is_a_403_to_a_user(owner_client):
    admin_operations = [(method, template) for method, template, callback in routes()
                        if is_admin_operation(method, callback)]
    # The generated list agrees with the schema's (tests/foundation/test_openapi.py), and is not empty.
    from tests.foundation.test_openapi import ADMIN_OPERATIONS

    assert set(admin_operations) == ADMIN_OPERATIONS
    for method, template in admin_operations:
        response = _call(owner_client, method, _fill(template))
        assert response.status_code == 403, f"{method.upper()} {template}: {response.status_code}"
        assert response.json()["error"]["code"] == "forbidden"


@pytest.fixture
def owned(owner, owner_client) -> dict[str, str]:
    """One object of each kind, made by the owner through the API."""
    session = owner_client.post("/api/sessions", {}, format="json").json()["id"]
    document = owner_client.post("/api/kb/documents", {"filename": "mine.md", "content": "Owner's notes."},
                                 format="json").json()["id"]
    upload = owner_client.post("/api/upload", {"filename": "mine.txt", "content_base64": base64.b64encode(
        b"owner's file").decode()}, format="json").json()["id"]
    task = owner_client.post("/api/scheduler/tasks", {"name": "mine", "cron": "0 9 * * *", "prompt": "hello"},
                             format="json").json()["id"]
    workflow = owner_client.post("/api/workflows", {"name": "mine", "nodes": [
        {"id": "in", "name": "in", "type": "input", "config": {}},
        {"id": "out", "name": "out", "type": "output", "config": {}}], "edges": [{"from": "in", "to": "out"}]},
        format="json").json()["id"]
    run = owner_client.post(f"/api/workflows/{workflow}/run", {"input": "x"}, format="json").json()["id"]
    key = str(owner_client.post("/api/keys", {"name": "mine"}, format="json").json()["id"])
    # A stored /v1/responses response needs a model to answer it: stored as POST /v1/responses stores one.
    from compat.models import StoredResponse
    from compat.responses import new_id

    stored_id = new_id("resp")
    response = StoredResponse.objects.create(id=stored_id, owner=owner, response={"id": stored_id}).id
    gated = owner_client.post("/api/workflows", {"name": "gated", "nodes": [
        {"id": "in", "name": "in", "type": "input", "config": {}},
        {"id": "ask", "name": "ask", "type": "approval", "config": {}}], "edges": [{"from": "in", "to": "ask"}]},
        format="json").json()["id"]
    owner_client.post(f"/api/workflows/{gated}/run", {"input": "x"}, format="json")
    approval = owner_client.get("/api/approvals").json()["results"][0]["id"]
    return {"session": session, "document": document, "upload": upload, "task": task, "workflow": workflow,
            "workflow_run": run, "key": key, "response": response, "approval": approval}


def _snapshot(client: APIClient, objects: dict[str, str]) -> dict[str, object]:
    reads = {"session": f"/api/sessions/{objects['session']}", "document": "/api/kb/documents",
             "upload": "/api/uploads", "task": "/api/scheduler/tasks",
             "workflow": f"/api/workflows/{objects['workflow']}/export",
             "workflow_run": f"/api/workflows/runs/{objects['workflow_run']}", "key": "/api/keys",
             "response": f"/v1/responses/{objects['response']}", "approval": "/api/approvals"}
    snapshot = {}
    for kind, path in reads.items():
        response = client.get(path)
        assert response.status_code == 200, f"{kind}: {response.status_code}"
        snapshot[kind] = response.json()
    return snapshot


def test_every_object_route_is_a_404_to_another_users_object(owner_client, other_client, owned):
    before = _snapshot(owner_client, owned)
    checked = set()
    for method, template, _callback in routes():
        kind = OBJECT_ROUTES.get(template)
        if kind is None:
            continue
        path = (template.replace("{pk}", owned[kind]).replace("{run_id}", owned[kind])
                .replace("{approval_id}", owned[kind]).replace("{number}", "1"))
        path = path.replace("{trigger_id}", str(uuid.uuid4()))
        response = _call(other_client, method, path, body=VALID_BODIES.get((method, template)))
        if response.status_code == 405:
            continue
        assert response.status_code == 404, f"{method.upper()} {template} as another user: {response.status_code}"
        assert response.json()["error"]["code"] == "not_found", f"{method.upper()} {template}"
        checked.add((method, template))
    for method, path, parameter, kind in OBJECT_QUERIES:
        response = _call(other_client, method, f"{path}?{parameter}={owned[kind]}")
        assert response.status_code == 404, f"{method.upper()} {path}?{parameter}= as another user"
        checked.add((method, path))
    assert len(checked) >= 20
    time.sleep(0)  # nothing asynchronous to wait for: every call above returned
    assert _snapshot(owner_client, owned) == before

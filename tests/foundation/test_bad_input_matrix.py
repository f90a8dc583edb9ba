"""Bad input on every operation that takes a body (issue 15, item 5), generated from the schema.

Every operation whose schema has a request body gets, on a real object of the caller's where its path names
one: malformed JSON, JSON that is not an object, an object missing its required fields, an empty body,
invalid UTF-8, JSON sent as text/plain, as a form or with no content type, every field set to the wrong
type, to a string with a NUL character, to a 1 MB string, and fields nested too deep. Each must be a 4xx in
its path's envelope (never a 5xx); a refused request changes no row of any table (nothing stored
half-way). Both CI passes run it, so PostgreSQL's own refusals (NUL in text and in jsonb) are covered too.

Also here: every route of the URL conf is an operation of the schema, so schemathesis
(tests/foundation/test_schemathesis.py) reaches every endpoint, the new facets included.
"""

from __future__ import annotations

import base64
import json

import pytest
from django.apps import apps
from django.db import connection
from django.test import Client

from tests.foundation.test_openapi import ADMIN_OPERATIONS, PUBLIC_OPERATIONS
from tests.security.conftest import url_routes
from tests.security.test_authz_matrix import OBJECT_PARAMETERS

# The object a route's id names (a user's: the admins' own objects are named by other parameters).
OBJECT_ROUTES = {template: kind for (template, name), kind in OBJECT_PARAMETERS.items()
                 if name in ("pk", "run_id", "approval_id")}
ROUTE_METHODS = ("get", "post", "put", "patch", "delete")


def _methods(callback) -> list[str]:
    cls = getattr(callback, "view_class", None) or getattr(callback, "cls", None)
    if cls is not None and hasattr(cls, "http_method_names"):
        handlers = [method for method in ROUTE_METHODS if hasattr(cls, method)]
        if handlers:
            return handlers
    return list(ROUTE_METHODS)  # a function view: try them all


def routes() -> list[tuple[str, str, object]]:
    """(method, path template, callback) for every /api and /v1 route of the URL conf."""
    return [(method, route.template, route.callback) for route in url_routes() for method in _methods(route.callback)]


pytestmark = pytest.mark.django_db(transaction=True)

HUGE = "x" * 1_000_000
# Operations whose body is not JSON, or which start a stream: their JSON variants are covered by their own tests
# (uploads take multipart too; the streams answer their errors before the stream starts, as JSON, tested here).
NOT_JSON = {("post", "/api/voice/stt")}


@pytest.fixture
def schema(client) -> dict:
    return client.get("/api/schema?format=json").json()


def _operations(schema: dict) -> list[tuple[str, str, dict]]:
    found = []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            content = operation.get("requestBody", {}).get("content", {})
            if "application/json" in content and (method, path) not in NOT_JSON:
                found.append((method, path, _resolve(schema, content["application/json"]["schema"])))
    return found


def _resolve(schema: dict, node: dict) -> dict:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


def _properties(schema: dict, body_schema: dict) -> dict[str, dict]:
    properties = {}
    for part in [body_schema, *body_schema.get("allOf", [])]:
        part = _resolve(schema, part)
        properties.update(part.get("properties", {}))
    return properties


def _wrong_type(prop: dict):
    kind = prop.get("type")
    return {"string": 12345, "integer": "twelve", "number": "many", "boolean": "perhaps", "array": {"not": "a list"},
            "object": ["not", "an", "object"]}.get(kind, [[["?"]]])


# The audit log records refusals by design (a failed or rate-limited login is an event: issue 28).
RECORDS_REFUSALS = {"accounts.AuditEvent"}


def _counts() -> dict[str, int]:
    """The rows of every table, in one statement (a COUNT a model was ~60 round trips a request, twice)."""
    models = [model for model in apps.get_models()
              if model._meta.managed and not model._meta.proxy and model._meta.label not in RECORDS_REFUSALS]
    quote = connection.ops.quote_name
    sql = " UNION ALL ".join(f"SELECT {index}, COUNT(*) FROM {quote(model._meta.db_table)}"
                             for index, model in enumerate(models))
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return {models[index]._meta.label: count for index, count in cursor.fetchall()}


@pytest.fixture
def clients(owner, admin):
    from accounts.tokens import token_pair_for

    def with_token(user):
        return Client(HTTP_AUTHORIZATION=f"Bearer {token_pair_for(user)['token']}")

    return {"user": with_token(owner), "admin": with_token(admin), "public": Client()}


@pytest.fixture
def objects(clients) -> dict[str, str]:
    client = clients["user"]

    def post(path: str, body: dict) -> dict:
        response = client.post(path, body, content_type="application/json")
        assert response.status_code in (200, 201), f"{path}: {response.status_code} {response.content[:200]!r}"
        return response.json()

    # Listing the agents makes the agent `default` when a flushed database lacks its migration's row: a refused
    # request that reads it later must not be the one that stores it.
    assert client.get("/api/agents").status_code == 200
    workflow = post("/api/workflows", {"name": "target", "nodes": [
        {"id": "in", "name": "in", "type": "input", "config": {}},
        {"id": "out", "name": "out", "type": "output", "config": {}}], "edges": [{"from": "in", "to": "out"}]})["id"]
    return {
        "session": post("/api/sessions", {})["id"],
        "document": post("/api/kb/documents", {"filename": "target.md", "content": "Some notes."})["id"],
        "upload": post("/api/upload", {"filename": "t.txt", "content_base64": base64.b64encode(b"x").decode()})["id"],
        "task": post("/api/scheduler/tasks", {"name": "target", "cron": "0 9 * * *", "prompt": "hi"})["id"],
        "workflow": workflow,
        "workflow_run": post(f"/api/workflows/{workflow}/run", {"input": "x"})["id"],
        "key": str(post("/api/keys", {"name": "target"})["id"]),
        "approval": _approval(post),
        "collection": post("/api/kb/collections", {"name": "target"})["id"],
        "agent": str(post("/api/agents", {"slug": "target", "name": "Target"})["id"]),
        "mcp_server": "no-such-server",  # the admins': a user's bad body meets its 404 (its own tests try the rest)
        "a2a_remote": "999999",  # the admins' too (tests/a2a_app try the rest)
    }


def _approval(post) -> str:
    """A pending approval of the user's: a run of a workflow with an approval node, waiting."""
    gated = post("/api/workflows", {"name": "gated", "nodes": [
        {"id": "in", "name": "in", "type": "input", "config": {}},
        {"id": "ask", "name": "ask", "type": "approval", "config": {}}], "edges": [{"from": "in", "to": "ask"}]})["id"]
    run = post(f"/api/workflows/{gated}/run", {"input": "x"})
    assert run["status"] == "waiting", run
    from workflows.models import WorkflowApproval

    return str(WorkflowApproval.objects.get(run_id=run["id"]).pk)


def _variants(schema: dict, body_schema: dict) -> list[tuple[str, bytes, str | None]]:
    """(name, body, content type) of every bad request for one operation."""
    properties = _properties(schema, body_schema)
    json_type = "application/json"
    variants = [
        ("malformed JSON", b'{"a": ', json_type),
        ("a JSON array", b"[]", json_type),
        ("a JSON string", b'"text"', json_type),
        ("a JSON number", b"42", json_type),
        ("JSON null", b"null", json_type),
        ("no fields (the required ones missing)", b"{}", json_type),
        ("an empty body", b"", json_type),
        ("invalid UTF-8", b'{"a": "\xff\xfe"}', json_type),
        ("nested 1,000 deep", b'{"a": ' * 1000 + b"1" + b"}" * 1000, json_type),
        ("JSON as text/plain", b"{}", "text/plain"),
        ("a form", b"a=1&b=2", "application/x-www-form-urlencoded"),
        ("no content type", b"{}", None),
    ]
    if properties:
        variants.append(("every field of the wrong type", json.dumps(
            {name: _wrong_type(prop) for name, prop in properties.items()}).encode(), json_type))
        for name, prop in properties.items():
            if prop.get("type") == "string" and not prop.get("readOnly"):
                variants.append((f"NUL in {name}", json.dumps({name: "before\x00after"}).encode(), json_type))
                variants.append((f"1 MB in {name}", json.dumps({name: HUGE}).encode(), json_type))
            if prop.get("type") in ("object", None) and not prop.get("readOnly"):
                variants.append((f"NUL inside {name}", json.dumps({name: {"k\x00": "v\x00"}}).encode(), json_type))
    return variants


def _client_for(method: str, path: str, clients: dict) -> Client:
    if (method, path) in ADMIN_OPERATIONS:
        return clients["admin"]
    if (method, path) in PUBLIC_OPERATIONS and not path.startswith("/v1"):
        return clients["public"]
    return clients["user"]


def test_every_route_is_an_operation_of_the_schema(schema):
    operations = {(method, path) for path, ops in schema["paths"].items() for method in ops}
    for method, template, _callback in routes():
        if template in ("/api/schema", "/api/docs"):
            continue
        assert (method, template.replace("{pk}", "{id}")) in operations, (
            f"{method.upper()} {template} is not in /api/schema: schemathesis cannot reach it")


def test_every_bad_body_on_every_operation_is_a_4xx_envelope_and_stores_nothing(schema, clients, objects):
    from catalogue.selectors import config_get

    config_get()  # the config row is made on first read, by whichever request reads it first
    operations = _operations(schema)
    assert len(operations) >= 20, [(m, p) for m, p, _s in operations]
    failures: list[str] = []
    tried = 0
    for method, path, body_schema in operations:
        kind = OBJECT_ROUTES.get(path.replace("{id}", "{pk}"))
        concrete = (path.replace("{id}", objects[kind]).replace("{run_id}", objects[kind])
                    .replace("{approval_id}", objects[kind])) if kind else path
        client = _client_for(method, path, clients)
        for name, body, content_type in _variants(schema, body_schema):
            before = _counts()
            extra = {"content_type": content_type} if content_type else {}
            if content_type is None:
                response = getattr(client, method)(concrete, data=body, content_type="")
            else:
                response = getattr(client, method)(concrete, data=body, **extra)
            tried += 1
            status = response.status_code
            where = f"{method.upper()} {path} with {name}: {status}"
            if status >= 500:
                failures.append(f"{where} {response.content[:300]!r}")
                continue
            if status < 400:
                continue  # accepted (a 1 MB document is a document): nothing to check for half-stored rows
            body = response.json()
            error = body.get("error", {})
            if path.startswith("/oauth/"):  # OAuth's own shape (RFC 6749 §5.2), which its clients read
                if not (isinstance(error, str) and isinstance(body.get("error_description"), str)):
                    failures.append(f"{where}: not OAuth's error shape: {response.content[:200]!r}")
            elif not ({"message", "type"} <= set(error) if path.startswith("/v1")
                      else {"code", "message"} <= set(error)):
                failures.append(f"{where}: not the envelope: {response.content[:200]!r}")
            if _counts() != before:
                changed = {label: (before[label], count) for label, count in _counts().items()
                           if before.get(label) != count}
                failures.append(f"{where}: refused but rows changed: {changed}")
    assert tried >= 300
    assert not failures, "\n".join(failures)

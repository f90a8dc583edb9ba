"""The authorisation matrix, generated from the server's own routing and its views' permission classes: anonymous
callers (every bad credential), a user, another user and an admin on every route (the suite's only matrix).

Routes come from the URL conf and the ASGI mounts (tests/security/conftest.py), methods are every method a
client can send, admin operations come from the views' permission classes, object parameters from the
route templates and the schema's uuid query parameters. Nothing below lists what must be protected; the
short lists say what is *exempt* (PUBLIC, each with its reason) and what a parameter names (so that a test
can make one), and a route that appears without an entry fails the coverage test. Hence:

- every route and method that is not public answers 401, in its path's error envelope with a
  `WWW-Authenticate: Bearer` challenge, to each kind of bad credential (`bad_credentials` below), the
  /v1 routes with `compat_auth: "token"` set through the API, and the /mcp mount's paths too;
- every admin operation answers 403 `forbidden` to a user's valid token (and not to an admin's);
- every route naming an object answers 404 `not_found` to another user's object, for every method, with
  the same body as for an id that does not exist, and the same request from the owner succeeds; an
  admin's token gets the same 404 (admins see other users' objects in Django admin only); the owner's
  objects read the same before and after;
- no request of another user or an admin on the other routes (lists, searches, the agent) shows or
  changes the owner's objects;
- the same refusals hold through the ASGI application daphne serves, not only Django's test client;
- every Django admin page wants a staff session (a bearer token, even an admin's, does not open it).

Cost: ~20 s of CPU on SQLite (the 401 matrix sends ~5,000 requests in-process).
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from datetime import timedelta
from types import SimpleNamespace

import httpx
import jwt
import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import AnonymousUser
from rest_framework.test import APIClient
from rest_framework_simplejwt.tokens import AccessToken

from agentsite.core.datadir import data_dir_path, secrets_read
from mcpbridge import paths as mcp_paths
from tests.conftest import PASSWORD
from tests.security.conftest import (
    HTTP_METHODS,
    WORKFLOW_EDGES,
    WORKFLOW_NODES,
    Route,
    asgi_mounts,
    objects_made_through_the_api,
    stream_text,
    url_routes,
)

pytestmark = pytest.mark.django_db(transaction=True)

BODY_METHODS = ("post", "put", "patch", "delete")
# (method, template) that answer without a token; HEAD follows GET and OPTIONS follows any public method.
PUBLIC = {
    ("post", "/api/auth/login"): "how a token is obtained in the first place",
    ("post", "/api/auth/register"): "how an account is made; it answers 403 itself when registration is closed",
    ("get", "/api/auth/options"): "the log-in form asks whether registration is open before any token exists",
    ("get", "/api/auth/oidc/login"): "starts a single sign-on: the browser has no token yet",
    ("get", "/api/auth/oidc/callback"): "the identity provider's answer: the state and the browser's cookie are the "
                                        "credential",
    ("post", "/api/auth/oidc/session"): "the single-use ticket cookie the callback set is the credential",
    ("post", "/api/auth/refresh"): "the refresh token in the body is the credential",
    ("get", "/api/health"): "liveness probes carry no token",
    ("get", "/api/schema"): "the contract, for SDK generators and the docs page",
    ("get", "/api/docs"): "the contract rendered for people",
    ("get", "/api/voices"): "a static list of voice presets",
    ("get", "/.well-known/oauth-protected-resource"): "RFC 9728: how an MCP client finds where to authorize",
    ("get", "/.well-known/oauth-protected-resource/mcp"): "RFC 9728, the form suffixed with the resource's path",
    ("get", "/.well-known/oauth-protected-resource/a2a"): "RFC 9728: how an A2A client finds where to authorize",
    ("get", "/.well-known/oauth-authorization-server"): "RFC 8414: the authorization server's endpoints",
    ("get", "/.well-known/agent-card.json"): "A2A discovery: it lists only the agents the operator made public "
                                             "(none by default)",
    ("post", "/oauth/register"): "RFC 7591: a connector registers before anyone signs in (rate-limited)",
    ("get", "/oauth/authorize"): "the browser arrives without a token; the consent page signs the user in",
    ("post", "/oauth/token"): "the code with its PKCE verifier, or the refresh token, is the credential",
    ("post", "/oauth/revoke"): "RFC 7009: the token itself is what is revoked; the client identifies itself",
    ("get", "/api/mcp/oauth/callback"): "a remote authorization server's answer: the single-use state is the "
                                        "credential",
}
# Public only while config `compat_auth` is "public" (or "local", the default, from loopback), where any
# placeholder key is accepted.
COMPAT_PUBLIC = {("get", "/v1/models"), ("post", "/v1/chat/completions"), ("post", "/v1/embeddings"),
                 ("post", "/v1/responses"), ("get", "/v1/responses/{pk}"), ("delete", "/v1/responses/{pk}"),
                 ("post", "/v1/messages"), ("post", "/v1/messages/count_tokens"), ("get", "/v1/models/{model_id}"),
                 ("get", "/v1/responses/{pk}/input_items")}
# Views written as functions have no permission classes to read a role from: each says its role here, so a
# new one (an admin-only one above all) cannot slip through the 403 matrix unseen.
FUNCTION_VIEW_ROLES = {"/api/sessions/{pk}/chat": "user", "/api/sessions/{pk}/messages/{mid}/regenerate": "user",
                       "/api/workflows/{pk}/run": "user",
                       "/v1/models": "compat", "/v1/chat/completions": "compat", "/v1/embeddings": "compat",
                       "/v1/responses": "compat", "/v1/responses/{pk}": "compat",
                       "/v1/messages": "compat", "/v1/messages/count_tokens": "compat",
                       "/v1/models/{model_id}": "compat", "/v1/responses/{pk}/input_items": "compat"}
# What a path parameter names: the kind of object (tests/security/conftest.py makes one of each).
OBJECT_PARAMETERS = {
    ("/api/sessions/{pk}", "pk"): "session", ("/api/sessions/{pk}/messages", "pk"): "session",
    ("/api/sessions/{pk}/rename", "pk"): "session", ("/api/sessions/{pk}/chat", "pk"): "session",
    ("/api/sessions/{pk}/export", "pk"): "session",
    ("/api/sessions/{pk}/messages/{mid}/regenerate", "pk"): "session",
    ("/api/sessions/{pk}/messages/{mid}/regenerate", "mid"): "message",
    ("/api/sessions/{pk}/messages/{mid}/stop", "pk"): "session",
    ("/api/sessions/{pk}/messages/{mid}/stop", "mid"): "message",
    ("/api/kb/documents/{pk}", "pk"): "document",
    ("/api/kb/collections/{pk}", "pk"): "collection", ("/api/kb/collections/{pk}/access", "pk"): "collection",
    ("/api/kb/collections/{pk}/transfer", "pk"): "collection",
    ("/api/uploads/{pk}", "pk"): "upload",
    ("/api/scheduler/tasks/{pk}", "pk"): "task", ("/api/scheduler/run/{pk}", "pk"): "task",
    ("/api/workflows/{pk}", "pk"): "workflow", ("/api/workflows/{pk}/nodes", "pk"): "workflow",
    ("/api/workflows/{pk}/run", "pk"): "workflow", ("/api/workflows/{pk}/runs", "pk"): "workflow",
    ("/api/workflows/{pk}/export", "pk"): "workflow",
    ("/api/workflows/{pk}/access", "pk"): "workflow", ("/api/workflows/{pk}/transfer", "pk"): "workflow",
    ("/api/workflows/{pk}/versions", "pk"): "workflow", ("/api/workflows/{pk}/versions/{number}", "pk"): "workflow",
    ("/api/workflows/{pk}/versions/{number}", "number"): "workflow_version",
    ("/api/workflows/{pk}/versions/{number}/restore", "pk"): "workflow",
    ("/api/workflows/{pk}/versions/{number}/restore", "number"): "workflow_version",
    ("/api/workflows/{pk}/triggers", "pk"): "workflow", ("/api/workflows/{pk}/triggers/{trigger_id}", "pk"): "workflow",
    ("/api/workflows/{pk}/triggers/{trigger_id}", "trigger_id"): "trigger",
    ("/api/workflows/{pk}/triggers/{trigger_id}/rotate", "pk"): "workflow",
    ("/api/workflows/{pk}/triggers/{trigger_id}/rotate", "trigger_id"): "trigger",
    ("/api/workflows/runs/{run_id}", "run_id"): "workflow_run",
    ("/api/agents/{pk}", "pk"): "agent", ("/api/agents/{pk}/versions", "pk"): "agent",
    ("/api/agents/{pk}/versions/{number}", "pk"): "agent",
    ("/api/agents/{pk}/versions/{number}", "number"): "agent_version",
    ("/api/agents/{pk}/versions/{number}/restore", "pk"): "agent",
    ("/api/agents/{pk}/versions/{number}/restore", "number"): "agent_version",
    ("/api/agents/{pk}/access", "pk"): "agent", ("/api/agents/{pk}/transfer", "pk"): "agent",
    ("/api/approvals/{approval_id}", "approval_id"): "approval",
    ("/api/keys/{pk}", "pk"): "key",
    ("/v1/responses/{pk}", "pk"): "response",  # a stored /v1/responses response: its owner's only
    ("/v1/responses/{pk}/input_items", "pk"): "response",
    # Not anyone's object: a name in the model catalogue every caller shares (the ids /v1/models lists).
    ("/v1/models/{model_id}", "model_id"): "catalogue_model",
    # Not a user's object: an MCP server is the admins' (its route is admin-only, a 403 to everyone else, which
    # the 403 matrix checks), so the ownership matrix below leaves it out.
    ("/api/mcp/servers/{name}", "name"): "mcp_server", ("/api/mcp/servers/{pk}/access", "pk"): "mcp_server",
    ("/api/mcp/servers/{name}/reconnect", "name"): "mcp_server",
    # A remote A2A agent is the admins' too: its writes are admin-only; reading it follows its access rule.
    ("/api/a2a/remotes/{remote_id}", "remote_id"): "a2a_remote",
    ("/api/a2a/remotes/{remote_id}/refresh", "remote_id"): "a2a_remote",
    ("/api/a2a/remotes/{pk}/access", "pk"): "a2a_remote",
    # The model catalogue's connections and aliases are the agent's config: admin-only, like an MCP server.
    ("/api/connections/{connection_id}", "connection_id"): "connection",
    ("/api/connections/{connection_id}/discover", "connection_id"): "connection",
    ("/api/aliases/{alias_id}", "alias_id"): "alias",
    # A user and their budget (issue 27): admin-only, the admins' to manage.
    ("/api/users/{user_id}", "user_id"): "user",
    ("/api/users/{user_id}/budget", "user_id"): "user",
    # A group is no user's object: admins manage it, its managers its members, its members read it.
    # tests/organisation/test_group_matrix.py holds every group route to that, for each of those and an outsider.
    ("/api/groups/{group_id}", "group_id"): "group", ("/api/groups/{group_id}/members", "group_id"): "group",
    ("/api/groups/{group_id}/members/{user_id}", "group_id"): "group",
    ("/api/groups/{group_id}/members/{user_id}", "user_id"): "member",
    ("/api/groups/{group_id}/budget", "group_id"): "group",
    # An app connected to the user's account (their OAuth grants to one client): theirs alone; an admin reaches
    # another user's only with ?user= (tests/oauth).
    ("/api/oauth/apps/{client_id}", "client_id"): "connected_app",
    # A consent waiting for a decision is no user's until one signed-in user decides it (tests/oauth).
    ("/api/oauth/consents/{consent_id}", "consent_id"): "consent",
}
ADMIN_OBJECTS = {"mcp_server", "connection", "alias", "user", "a2a_remote"}
# An admin object the matrix makes none of, named by an id its path converter takes (else the path is not routed).
ADMIN_PLACEHOLDERS = {"a2a_remote": "999999"}
# Objects no user owns whose routes have a matrix of their own (see OBJECT_PARAMETERS): groups and their members
# (tests/organisation/test_group_matrix.py), a consent under way (tests/oauth).
GROUP_OBJECTS = {"group", "member", "consent"}
# Names no one owns, with a value that exists for every caller: left out of the ownership matrix.
SHARED_NAMES = {"catalogue_model": "agent"}
# A user's objects that admins manage too, by design (issue 27: admins list and revoke anyone's API keys;
# tests/accounts/test_api_keys.py): the 404 matrix holds them to it for other users only.
# Shareable resources are the admins' to manage too (the access policy gives them the owner's role, issue 44:
# tests/organisation/test_share_matrix.py holds every role to it).
ADMIN_MANAGED = {"key", "workflow", "workflow_version", "trigger", "workflow_run", "collection", "document", "agent",
                 "agent_version"}
# What a query parameter the schema documents as a uuid names.
OBJECT_QUERY_PARAMETERS = {("/api/scheduler/history", "task"): "task",
                           ("/api/kb/documents", "collection"): "collection"}
# A valid body where a view reads its body before its object: the owner's same request must succeed, so a
# 404 to another user is the object's doing, not the body's.
def _owner_itself() -> dict:
    """A transfer's valid body: to the owner itself (the same request from the owner changes nothing)."""
    from django.contrib.auth import get_user_model  # the user model: after the app registry is ready

    return {"user": get_user_model().objects.get(username="owner").pk}


VALID_BODIES = {
    ("post", "/api/sessions/{pk}/chat"): {"message": "hello again"},
    ("put", "/api/sessions/{pk}/rename"): {"name": "renamed"},
    ("put", "/api/scheduler/tasks/{pk}"): {"name": "renamed", "cron": "0 10 * * *", "prompt": "changed"},
    ("patch", "/api/scheduler/tasks/{pk}"): {"enabled": False},
    ("post", "/api/workflows/{pk}/run"): {"input": "again"},
    ("post", "/api/workflows/{pk}/nodes"): {"id": "wait", "name": "wait", "type": "delay", "config": {"delayMs": 0}},
    ("put", "/api/workflows/{pk}"): {"name": "renamed", "description": "changed", "nodes": WORKFLOW_NODES,
                                     "edges": WORKFLOW_EDGES},
    ("patch", "/api/workflows/{pk}"): {"description": "changed"},
    ("post", "/api/approvals/{approval_id}"): {"decision": "approve"},
    ("put", "/api/workflows/{pk}/access"): {"visibility": "private", "grants": []},
    ("put", "/api/kb/collections/{pk}/access"): {"visibility": "private", "grants": []},
    ("post", "/api/kb/collections/{pk}/transfer"): _owner_itself,
    ("patch", "/api/kb/collections/{pk}"): {"description": "changed"},
    ("post", "/api/workflows/{pk}/transfer"): _owner_itself,
    ("patch", "/api/agents/{pk}"): {"description": "changed"},
    ("put", "/api/agents/{pk}/access"): {"visibility": "private", "grants": []},
    ("post", "/api/agents/{pk}/transfer"): _owner_itself,
}

# The other shapes of a request whose answer takes another road (queued, streamed): another user's 404 too.
BODY_VARIANTS = {
    ("post", "/api/workflows/{pk}/run"): [{"input": "x", "async": True}, {"input": "x", "stream": True}],
    ("post", "/api/sessions/{pk}/chat"): [{"message": "hi", "model": "agent"}],
}


def _is_public(method: str, template: str) -> bool:
    """Whether the operation answers without a token whatever the config says (/v1 runs with compat_auth
    "token" in these tests, where COMPAT_PUBLIC is not public)."""
    public = set(PUBLIC)
    if method == "head":
        method = "get"
    if method == "options":
        return any(template == public_template for _method, public_template in public)
    return (method, template) in public


def _operations(routes: list[Route]):
    for route in routes:
        for method in HTTP_METHODS:
            yield route, method


def _send(client: APIClient, method: str, path: str, headers: dict | None = None, body=None):
    body = body() if callable(body) else body
    if method in BODY_METHODS:
        return getattr(client, method)(path, body if body is not None else {}, format="json", **(headers or {}))
    return getattr(client, method)(path, **(headers or {}))


def _bearer(token: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def _segment(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def _register(client: APIClient, username: str) -> dict:
    response = client.post("/api/auth/register", {"username": username, "password": PASSWORD}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


# --- credentials ------------------------------------------------------------------------------------------

# A request with no Bearer credentials at all is `not_authenticated`; one whose Bearer token is missing or does
# not stand is `token_invalid` (a client logs in again for the first, refreshes or re-logs in for the second).
NO_BEARER_KINDS = {"no token", "another scheme", "a valid token under another scheme"}


@pytest.fixture
def bad_credentials(owner, admin, django_user_model) -> dict[str, dict[str, str]]:
    """Each kind of credential that must not get past authentication, as request headers; the forged ones
    carry the owner's own valid claims, so only the forgery is wrong."""
    anon = APIClient()
    login = anon.post("/api/auth/login", {"username": "owner", "password": PASSWORD}, format="json").json()
    key = secrets_read(data_dir_path())["jwt_signing_key"]  # the server's real key, from its data dir
    claims = jwt.decode(login["token"], key, algorithms=["HS256"])  # raises unless that key signed the login's
    assert claims["token_type"] == "access" and claims["pwv"]

    expired = AccessToken(login["token"])  # simplejwt, which signs with the server's key
    expired.set_exp(from_time=expired.current_time - timedelta(hours=2), lifetime=timedelta(hours=1))
    header, _payload, signature = login["token"].split(".")
    edited = ".".join([header, _segment({**claims, "user_id": admin.pk}), signature])
    unbound = {name: value for name, value in claims.items() if name != "pwv"}

    changer = _register(anon, "changer")
    changed = APIClient()
    changed.credentials(**_bearer(changer["token"]))
    response = changed.post("/api/auth/change-password", {"old_password": PASSWORD,
                                                          "new_password": "another-horse-battery-7"}, format="json")
    assert response.status_code == 200, response.content
    leaver, gone = _register(anon, "leaver"), _register(anon, "gone")
    for pair in (leaver, gone):  # used once first, so that every per-process cache has seen them valid
        assert anon.get("/api/auth/me", **_bearer(pair["token"])).status_code == 200
    django_user_model.objects.filter(username="gone").get().delete()
    deactivated = django_user_model.objects.get(username="leaver")
    deactivated.is_active = False
    deactivated.save()
    return {
        "no token": {},
        "empty bearer": {"HTTP_AUTHORIZATION": "Bearer"},
        "another scheme": {"HTTP_AUTHORIZATION": "Basic " + base64.b64encode(f"owner:{PASSWORD}".encode()).decode()},
        "a valid token under another scheme": {"HTTP_AUTHORIZATION": f"Token {login['token']}"},
        "malformed": _bearer("x.y.z"),
        "garbage": _bearer("%%not-a-token%%"),
        "expired": _bearer(str(expired)),
        "signed with another key": _bearer(jwt.encode(claims, "another-key-" + "k" * 40, algorithm="HS256")),
        "alg none": _bearer(f"{_segment({'alg': 'none', 'typ': 'JWT'})}.{_segment(claims)}."),
        "HS512 with the server's key": _bearer(jwt.encode(claims, key, algorithm="HS512")),
        "payload edited": _bearer(edited),
        "refresh token as access": _bearer(login["refresh"]),
        "without the password claim": _bearer(jwt.encode(unbound, key, algorithm="HS256")),
        "issued before a password change": _bearer(changer["token"]),
        "of a deactivated user": _bearer(leaver["token"]),
        "of a deleted user": _bearer(gone["token"]),
    }


def _code_for(kind: str) -> str:
    return "not_authenticated" if kind in NO_BEARER_KINDS else "token_invalid"


def _assert_401(response, *, method: str, where: str, kind: str, openai_shape: bool) -> None:
    where = f"{method.upper()} {where} with {kind}"
    assert response.status_code == 401, f"{where}: {response.status_code} {response.content[:300]!r}"
    assert response.headers["WWW-Authenticate"].startswith("Bearer"), where
    if method == "head":
        return
    error = response.json()["error"]
    if openai_shape and where.split()[1].startswith("/v1/messages"):  # Anthropic's shape on that door
        assert response.json()["type"] == "error" and set(error) == {"type", "message"}, where
        assert error["type"] == "authentication_error", where
        return
    if openai_shape:
        assert set(error) == {"message", "type", "param", "code"}, where
        assert error["type"] == "authentication_error", where
        return
    assert set(error) == {"code", "message", "details", "request_id"}, where  # request_id: X-Request-Id
    assert error["code"] == _code_for(kind), f"{where}: {error['code']}"


def _fill(route: Route, objects: dict[str, str]) -> str:
    values = {}
    for name in route.parameters:
        kind = OBJECT_PARAMETERS.get((route.template, name))
        assert kind is not None, f"{route.template}: say in OBJECT_PARAMETERS which object {{{name}}} names"
        if kind in SHARED_NAMES:
            values[name] = SHARED_NAMES[kind]
        else:
            values[name] = (objects.get(kind, ADMIN_PLACEHOLDERS.get(kind, "no-such-server"))
                            if kind in ADMIN_OBJECTS | GROUP_OBJECTS
                            else objects[kind])
    return route.path(**values)


def _random_ids(route: Route) -> str:
    return route.path(**{name: str(uuid.uuid4()) for name in route.parameters})


# --- coverage ---------------------------------------------------------------------------------------------

def _schema_uuid_queries(client: APIClient) -> set[tuple[str, str, str]]:
    schema = client.get("/api/schema?format=json").json()
    return {(method, path, parameter["name"]) for path, operations in schema["paths"].items()
            for method, operation in operations.items() for parameter in operation.get("parameters", [])
            if parameter["in"] == "query" and parameter.get("schema", {}).get("format") == "uuid"}


def _passes_permissions(route: Route, method: str, user) -> bool:
    """Whether the view's permission classes let user do method (DRF views only)."""
    view = route.view_class()
    view.args, view.kwargs, view.format_kwarg = (), {}, None
    view.request = SimpleNamespace(method=("GET" if method == "head" else method.upper()), user=user, auth=None)
    return all(permission.has_permission(view.request, view) for permission in view.get_permissions())


def _handles(route: Route, method: str) -> bool:
    return hasattr(route.view_class, "get" if method == "head" else method)


def test_the_matrix_covers_every_route_and_every_route_is_accounted_for(api_routes, anon_client, owner):
    templates = {route.template for route in api_routes}
    assert len(api_routes) >= 45 and len(templates) >= 45, sorted(templates)
    assert {"/api/sessions/{pk}/chat", "/api/workflows/runs/{run_id}", "/v1/chat/completions"} <= templates
    assert asgi_mounts() == ["/mcp", "/a2a"]
    for method, template in set(PUBLIC) | COMPAT_PUBLIC:
        assert template in templates, f"{method} {template} is gone: update PUBLIC"
    for route in api_routes:
        for name in route.parameters:
            assert (route.template, name) in OBJECT_PARAMETERS, (
                f"{route.template}: say in OBJECT_PARAMETERS which object {{{name}}} names")
        if route.view_class is None:
            assert route.template in FUNCTION_VIEW_ROLES, f"{route.template}: a function view; say its role"
            continue
        for method in HTTP_METHODS:  # the permission classes agree with the public list
            if _handles(route, method) and _passes_permissions(route, method, AnonymousUser()):
                assert _is_public(method, route.template), (
                    f"{method.upper()} {route.template} lets anyone in: protect it or add it to PUBLIC")
    assert set(FUNCTION_VIEW_ROLES) == {route.template for route in api_routes if route.view_class is None}
    public_templates = {template for _method, template in PUBLIC}
    for template, role in FUNCTION_VIEW_ROLES.items():
        assert role in ("public", "compat", "user"), f"{template}: an admin-only function view needs a 403 test"
        assert (template in public_templates) == (role == "public"), template
        assert (template in {t for _m, t in COMPAT_PUBLIC}) == (role == "compat"), template
    for method, path, name in _schema_uuid_queries(anon_client):
        assert (path, name) in OBJECT_QUERY_PARAMETERS, f"{method} {path}?{name}= names an object: say which"


# --- 401 --------------------------------------------------------------------------------------------------

def test_every_route_that_is_not_public_refuses_every_bad_credential_with_a_401(
        api_routes, bad_credentials, owner_objects, admin_client):
    response = admin_client.patch("/api/config", {"compat_auth": "token"}, format="json")
    assert response.status_code == 200 and response.json()["compat_auth"] == "token"
    client = APIClient()
    refused, not_answered = 0, set()
    for route, method in _operations(api_routes):
        if _is_public(method, route.template):
            continue
        path = _fill(route, owner_objects)  # the owner's real objects: the forged tokens carry the owner's id
        for kind, headers in bad_credentials.items():
            response = _send(client, method, path, headers)
            if response.status_code == 405:
                not_answered.add((route, method))
                continue
            _assert_401(response, method=method, where=route.template, kind=kind,
                        openai_shape=route.template.startswith("/v1/"))
            refused += 1
    # A 405 before authentication is fine only for a method the view does not answer even to a valid token.
    for route, method in not_answered:
        status = _send(admin_client, method, _random_ids(route)).status_code
        assert status == 405, f"{method.upper()} {route.template}: 405 without a token, {status} with one"
    assert refused >= 3000, refused


V1_BODIES = {"/v1/chat/completions": {"model": "agent", "messages": [{"role": "user", "content": "hi"}]},
             "/v1/embeddings": {"model": "hash-256", "input": "hi"},
             "/v1/responses": {"model": "agent", "input": "hi"},
             "/v1/messages": {"model": "agent", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
             "/v1/messages/count_tokens": {"model": "agent", "messages": [{"role": "user", "content": "hi"}]}}


def test_every_v1_operation_is_public_only_while_compat_auth_says_so(bad_credentials, admin_client):
    client = APIClient()
    path_of = {template: template.format(pk="resp_nowhere", model_id="agent") for _method, template in COMPAT_PUBLIC}
    assert admin_client.patch("/api/config", {"compat_auth": "public"}, format="json").status_code == 200
    for method, template in sorted(COMPAT_PUBLIC):
        for kind in ("no token", "garbage"):  # any placeholder API key is accepted while public
            response = _send(client, method, path_of[template], bad_credentials[kind], V1_BODIES.get(template))
            where = f"{method.upper()} {template} with {kind} while public"
            # Served: 200, or the 404 of a stored response that is no one's.
            assert response.status_code == (404 if "{pk}" in template else 200), f"{where}: {response.status_code}"
        # A credential presented and dead (a JWT that does not stand) is refused in every mode, never anonymous.
        response = _send(client, method, path_of[template], bad_credentials["expired"], V1_BODIES.get(template))
        assert response.status_code == 401, f"{method.upper()} {template} with expired while public: " \
                                            f"{response.status_code}"
    assert admin_client.patch("/api/config", {"compat_auth": "token"}, format="json").status_code == 200
    for method, template in sorted(COMPAT_PUBLIC):
        _assert_401(_send(client, method, path_of[template], body=V1_BODIES.get(template)), method=method,
                    where=template, kind="no token", openai_shape=True)
        if "{pk}" not in template:
            response = _send(admin_client, method, path_of[template], body=V1_BODIES.get(template))
            assert response.status_code == 200, f"{method.upper()} {template} with a valid token"


def _mount_paths(prefix: str) -> list[str]:
    # Whatever the mounted app serves lies under its prefix: the known endpoints and a path it does not have.
    known = {mcp_paths.MCP_PATH: [mcp_paths.SSE_PATH, mcp_paths.MESSAGES_PATH],
             # An agent's endpoint and card: the agent `default` exists in every deployment.
             "/a2a": ["/a2a/default", "/a2a/default/.well-known/agent-card.json"]}.get(prefix, [])
    return [prefix, prefix + "/", *known, f"{prefix}/{uuid.uuid4().hex}"]


def _served(requests: list[tuple[str, str, dict[str, str]]]) -> list[httpx.Response]:
    """(method, path, headers) sent through the ASGI application daphne serves (agentsite.asgi: the limits
    wrapper, the mounts, then Django), in this process."""
    from agentsite.asgi import application

    async def send_all() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=application, client=("127.0.0.1", 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=5) as client:
            return [await client.request(method.upper(), path, headers={**headers, "Content-Type": "application/json"},
                                         content=b"{}" if method in BODY_METHODS else None)
                    for method, path, headers in requests]

    return async_to_sync(send_all)()


def _header_names(headers: dict[str, str]) -> dict[str, str]:
    return {"Authorization": headers["HTTP_AUTHORIZATION"]} if "HTTP_AUTHORIZATION" in headers else {}


def test_every_path_of_the_mounted_asgi_apps_refuses_every_bad_credential_with_a_401(bad_credentials):
    sent = [(method, path, kind) for prefix in asgi_mounts() for path in _mount_paths(prefix)
            for method in HTTP_METHODS for kind in bad_credentials]
    responses = _served([(method, path, _header_names(bad_credentials[kind])) for method, path, kind in sent])
    for (method, path, kind), response in zip(sent, responses, strict=True):
        _assert_401(response, method=method, where=path, kind=kind, openai_shape=False)
    assert len(sent) >= 7 * len(bad_credentials) * 4


def test_the_served_application_refuses_like_the_test_client(api_routes, bad_credentials, owner_objects,
                                                             owner_client, admin_client):
    """The test client skips the ASGI layers in front of Django (a mount could shadow an /api path): the
    matrix again through them, with one kind of bad credential (the layers never read a token)."""
    assert admin_client.patch("/api/config", {"compat_auth": "token"}, format="json").status_code == 200
    kinds = ("no token",)
    sent = [(route, method, kind) for route, method in _operations(api_routes)
            if not _is_public(method, route.template) for kind in kinds]
    responses = _served([(method, _fill(route, owner_objects), _header_names(bad_credentials[kind]))
                         for route, method, kind in sent])
    for (route, method, kind), response in zip(sent, responses, strict=True):
        if response.status_code == 405:  # as in the test client's matrix: only where a valid token gets 405
            assert _send(admin_client, method, _random_ids(route)).status_code == 405, route.template
            continue
        _assert_401(response, method=method, where=route.template, kind=kind,
                    openai_shape=route.template.startswith("/v1/"))
    token = owner_client._credentials["HTTP_AUTHORIZATION"]
    assert _served([("get", "/api/auth/me", {"Authorization": token})])[0].status_code == 200  # the control
    assert len(sent) >= 250


def test_the_bearer_scheme_is_read_case_insensitively_on_every_door(owner_objects, admin, admin_client):
    assert admin_client.patch("/api/config", {"compat_auth": "token"}, format="json").status_code == 200
    token = admin_client._credentials["HTTP_AUTHORIZATION"].split(" ", 1)[1]
    chat = {"model": "agent", "messages": [{"role": "user", "content": "hi"}]}
    for scheme in ("bearer", "BEARER"):  # RFC 7235: an auth scheme is case-insensitive; clients do send these
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"{scheme} {token}")
        assert client.get("/api/auth/me").status_code == 200, f"a DRF view with {scheme}"
        assert client.post("/v1/chat/completions", chat, format="json").status_code == 200, f"/v1 with {scheme}"
        session = client.post("/api/sessions", {}, format="json").json()["id"]
        assert client.post(f"/api/sessions/{session}/chat", {"message": "hi"}, format="json").status_code == 200

    mcp = _served([("get", "/mcp/nowhere", {"Authorization": f"{scheme} {token}"}) for scheme in ("bearer", "BEARER")])
    assert [response.status_code for response in mcp] == [404, 404]  # past authentication, to the mount's 404
    a2a = _served([("get", "/a2a/nowhere/else", {"Authorization": f"{scheme} {token}"})
                   for scheme in ("bearer", "BEARER")])
    assert [response.status_code for response in a2a] == [404, 404]


# --- 403 --------------------------------------------------------------------------------------------------

def _admin_operations(routes: list[Route], user) -> list[tuple[Route, str]]:
    """Operations a normal user's token passes authentication for but the view's permissions refuse."""
    return [(route, method) for route, method in _operations(routes)
            if route.view_class is not None and _handles(route, method)
            and not _passes_permissions(route, method, user)]


def test_every_admin_operation_is_a_403_to_a_user_and_not_to_an_admin(api_routes, owner, owner_client,
                                                                      admin_client):
    operations = _admin_operations(api_routes, owner)
    # Agrees with the schema's list (tests/foundation/test_openapi.py documents a 403 on each).
    from tests.foundation.test_openapi import ADMIN_OPERATIONS

    assert {(method, route.template) for route, method in operations
            if method not in ("head", "options")} == ADMIN_OPERATIONS
    for route, method in operations:
        path = _fill(route, {})  # an id the path's converter takes (an int for a remote A2A agent)
        response = _send(owner_client, method, path)
        where = f"{method.upper()} {route.template}"
        assert response.status_code == 403, f"{where} as a user: {response.status_code} {response.content[:200]!r}"
        if method != "head":
            assert response.json()["error"]["code"] == "forbidden", where
        # An admin is let through (an empty body may be a 400 or 404 afterwards, never a 401 or 403).
        assert _send(admin_client, method, path).status_code not in (401, 403), f"{where} as an admin"


def test_an_admin_who_loses_the_flag_gets_a_403_with_the_same_token_at_once(api_routes, admin, admin_client):
    operations = _admin_operations(api_routes, SimpleNamespace(is_authenticated=True, is_staff=False))
    route, method = next((route, method) for route, method in operations if method == "get")
    assert _send(admin_client, method, route.template).status_code == 200
    admin.is_staff = admin.is_superuser = False
    admin.save()
    assert _send(admin_client, method, route.template).status_code == 403


# --- 404 --------------------------------------------------------------------------------------------------

def _object_routes(routes: list[Route]) -> list[Route]:
    """Routes naming a user's object (not the admins' own objects, such as MCP servers)."""
    left_out = ADMIN_OBJECTS | GROUP_OBJECTS | set(SHARED_NAMES)
    return [route for route in routes if route.parameters and not any(
        OBJECT_PARAMETERS.get((route.template, name)) in left_out for name in route.parameters)]


def _owner_view(client: APIClient, routes: list[Route], objects: dict[str, str]) -> dict[str, object]:
    """Everything the owner can read about their objects: every GET route that is not public or admin-only,
    with their objects in the path, and each object query parameter set to theirs."""
    seen = {}
    for route in routes:
        if _is_public("get", route.template) or route.view_class is None:
            continue
        if not _handles(route, "get") or not _passes_permissions(route, "get", SimpleNamespace(
                is_authenticated=True, is_staff=False)):
            continue
        if any(OBJECT_PARAMETERS.get((route.template, name)) in GROUP_OBJECTS | ADMIN_OBJECTS
               for name in route.parameters):
            continue  # not the owner's: a group's routes have their own matrix; an MCP server is the admins'.
        path = _fill(route, objects)
        queries = [f"{path}?{name}={objects[kind]}" for (template, name), kind in OBJECT_QUERY_PARAMETERS.items()
                   if template == route.template]
        for url in [path, *queries]:
            response = client.get(url)
            if route.parameters or url != path:
                assert response.status_code == 200, f"GET {url}: {response.status_code}"
            is_json = response.get("Content-Type", "").startswith("application/json")
            seen[url] = (response.status_code, _without_clock(_without_request_id(response.json())) if is_json
                         else response.content)
    return seen


def _without_clock(body):
    """What moves with the clock alone: a budget window's `resets_at` (the next minute, day or month) changes
    when the snapshots straddle a boundary, though nothing was changed."""
    if isinstance(body, dict):
        return {key: _without_clock(value) for key, value in body.items() if key != "resets_at"}
    if isinstance(body, list):
        return [_without_clock(item) for item in body]
    return body


def _without_request_id(body):
    """Each answer carries its own request id (X-Request-Id); the rest must be the same."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return {**body, "error": {k: v for k, v in body["error"].items() if k != "request_id"}}
    return body


def _same_as_no_such_object(response, nowhere, where: str) -> None:
    if response.get("Content-Type", "").startswith("application/json"):
        assert _without_request_id(response.json()) == _without_request_id(nowhere.json()), \
            f"{where}: the answer differs from an id that does not exist"


def test_every_object_route_is_a_404_to_another_users_object_for_every_method(
        api_routes, owner_client, other_client, admin_client, owner_objects):
    before = _owner_view(owner_client, api_routes, owner_objects)
    assert sum(status == 200 for status, _body in before.values()) >= 12, sorted(before)
    accepted = set()
    for client, who in ((other_client, "another user"), (admin_client, "an admin")):
        for route, method in _operations(_object_routes(api_routes)):
            if client is admin_client and any(OBJECT_PARAMETERS.get((route.template, name)) in ADMIN_MANAGED
                                              for name in route.parameters):
                continue
            body = VALID_BODIES.get((method, route.template))
            where = f"{method.upper()} {route.template} as {who}"
            response = _send(client, method, _fill(route, owner_objects), body=body)
            nowhere = _send(client, method, _random_ids(route), body=body)
            if method == "options":  # DRF's description of the view: the same whatever the id, owner or not
                assert (response.status_code, response.content) == (nowhere.status_code, nowhere.content), where
                continue
            if response.status_code == 405:
                assert _send(owner_client, method, _random_ids(route), body=body).status_code == 405, (
                    f"{where}: 405, but the view answers this method to the owner")
                continue
            assert response.status_code == 404, f"{where}: {response.status_code} {response.content[:300]!r}"
            assert nowhere.status_code == 404, f"{where} with an id that does not exist: {nowhere.status_code}"
            if method != "head":
                assert response.json()["error"]["code"] == "not_found", where
                _same_as_no_such_object(response, nowhere, where)
            for variant in BODY_VARIANTS.get((method, route.template), []):
                response = _send(client, method, _fill(route, owner_objects), body=variant)
                assert response.status_code == 404, f"{where} with {variant}: {response.status_code}"
            accepted.add((route, method))
        for (path, name), kind in OBJECT_QUERY_PARAMETERS.items():
            if client is admin_client and kind in ADMIN_MANAGED:
                continue
            response = client.get(f"{path}?{name}={owner_objects[kind]}")
            assert response.status_code == 404, f"GET {path}?{name}= as {who}: {response.status_code}"
            assert response.json()["error"]["code"] == "not_found"
    assert len(accepted) >= 18, sorted((method, route.template) for route, method in accepted)
    assert _owner_view(owner_client, api_routes, owner_objects) == before, "another user changed the owner's objects"
    _the_owner_succeeds_where_others_got_404(owner_client, accepted)


def _the_owner_succeeds_where_others_got_404(owner_client: APIClient, operations: set) -> None:
    """The same requests from the owner succeed, so each 404 above was the object's owner check at work.
    They share one set of objects, but each delete has a set of its own, so that none spoils another."""
    shared = objects_made_through_the_api(owner_client, label="control")
    for route, method in sorted(operations, key=lambda item: (item[1] == "delete", item[0].template, item[1])):
        objects = shared if method != "delete" else objects_made_through_the_api(
            owner_client, label=f"c{time.monotonic_ns() % 10**9}")
        response = _send(owner_client, method, _fill(route, objects), body=VALID_BODIES.get((method, route.template)))
        where = f"{method.upper()} {route.template} as the owner"
        assert 200 <= response.status_code < 300, f"{where}: {response.status_code} {response.content[:300]!r}"
        if response.get("Content-Type", "").startswith("text/event-stream"):
            assert "event: done" in stream_text(response), where


# --- everything else ---------------------------------------------------------------------------------------

OWNER_LABEL = "orchard-owner"  # in the owner's object names and texts: no answer to anyone else may show it
# Requests that find the owner's objects when the owner sends them (checked), sent by everyone else too.
SEARCHES = {
    ("post", "/api/kb/search"): {"query": "orchard pear trees"},
    ("post", "/api/kb/context"): {"query": "orchard pear trees"},
    ("post", "/api/mcp/call"): {"server": "builtin", "tool": "kb_search", "arguments": {"query": "orchard pear"}},
    ("post", "/v1/chat/completions"): {"model": "agent", "messages": [{"role": "user", "content": "orchard pear?"}]},
}


def _text(response) -> str:
    return stream_text(response) if response.streaming else response.content.decode("utf-8", "replace")


def test_no_request_of_anyone_else_shows_or_changes_the_owners_objects(api_routes, owner_client, other_client,
                                                                        admin_client):
    objects = objects_made_through_the_api(owner_client, label=OWNER_LABEL)
    before = _owner_view(owner_client, api_routes, objects)
    for (method, template), body in SEARCHES.items():
        assert OWNER_LABEL in _text(_send(owner_client, method, template, body=body)), f"{template}: no control"
    # A key's and an agent's ids and a version number are small integers, found in any text: a key's and an
    # agent's names carry OWNER_LABEL instead, and a version is its workflow's or agent's.
    small = ("key", "workflow_version", "agent", "agent_version")
    marks = [OWNER_LABEL, *(value for kind, value in objects.items() if kind not in small)]
    # An admin's own operations change the server's shared state (its config, its MCP servers) by design.
    shared = set(_admin_operations(api_routes, SimpleNamespace(is_authenticated=True, is_staff=False)))
    sent = 0
    for client, who in ((other_client, "another user"), (admin_client, "an admin")):
        # Routes without an object in the path (those with one are the 404 matrix's), every method, with the
        # searches above where a route takes one: the answer names none of the owner's objects.
        for route, method in _operations([route for route in api_routes if not route.parameters]):
            if method in ("head", "options") or (client is admin_client and (route, method) in shared):
                continue
            body = SEARCHES.get((method, route.template), VALID_BODIES.get((method, route.template)))
            response = _send(client, method, route.template, body=body)
            where = f"{method.upper()} {route.template} as {who}"
            assert response.status_code < 500, f"{where}: {response.status_code}"
            leaked = [mark for mark in marks if mark in _text(response)]
            assert not leaked, f"{where} shows the owner's {leaked}"
            sent += 1
    assert sent >= 2 * 40
    assert _owner_view(owner_client, api_routes, objects) == before, "someone else changed the owner's objects"


# --- Django admin -------------------------------------------------------------------------------------------

ADMIN_PUBLIC = {"/admin/login/": "where a staff member signs in",
                "/admin/logout/": "signing out shows nothing and needs no session"}


def test_every_django_admin_page_sends_anyone_but_a_signed_in_staff_member_to_its_login(owner, admin, admin_client):
    """Django admin shows every user's objects: it takes a staff session only, never a bearer token."""
    from django.test import Client

    routes = [route for route in url_routes(("/admin/",)) if route.template not in ADMIN_PUBLIC]
    assert len(routes) >= 100, len(routes)
    user_session, admin_bearer = Client(), Client(HTTP_AUTHORIZATION=admin_client._credentials["HTTP_AUTHORIZATION"])
    user_session.force_login(owner)
    checked = 0
    for route in routes:
        path = route.path(**{name: "1" for name in route.parameters})
        for client, who in ((Client(), "no session"), (user_session, "a user's session"),
                            (admin_bearer, "an admin's bearer token")):
            for method in ("get", "post"):
                response = getattr(client, method)(path)
                where = f"{method.upper()} {route.template} with {who}"
                assert response.status_code == 302, f"{where}: {response.status_code}"
                assert response["Location"].startswith("/admin/login/"), f"{where}: to {response['Location']}"
                checked += 1
    staff = Client()
    staff.force_login(admin)
    assert staff.get("/admin/").status_code == 200  # the control
    assert checked >= 600

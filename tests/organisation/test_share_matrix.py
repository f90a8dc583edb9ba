"""Every shareable resource's routes, for every role a user can hold on it, answer what `can()` says.

The expected answers are generated from the policy (organisation.policy.can and role_of) on the very object
each request names: a success when `can(user, action, object)`, else 404 `not_found` when the user holds no
role (as for an object that does not exist) and 403 `forbidden` when the role is too low. What this file
declares is only what each route does (use, edit or manage: OPERATIONS) and how to reach it; the roles come
from real grants (a user's, a group's through a membership, `everyone`), so a view that checks the wrong action,
or none, or a rule that stops counting a grant, fails here. Every route under a kind's path must be declared:
a new one fails the coverage test until it says what it does.
"""

from __future__ import annotations

import atexit
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from organisation.models import EDITOR, EVERYONE, PRIVATE, SHARED, VIEWER, Group, Membership
from organisation.policy import EDIT, MANAGE, RESOURCES, USE, can, role_of
from tests.a2a_app.remote_agent import RemoteAgent, Served
from tests.conftest import client_for
from tests.security.conftest import url_routes
from tests.workflows.conftest import graph, node

pytestmark = pytest.mark.django_db

# Who asks: how each role comes about on the object (the owner made it; the others are set up below).
ROLES = ("owner", "admin", "editor", "viewer", "member", "everyone", "outsider")
SIMPLE = graph(node("start", "input"), node("out", "output"), edges=[("start", "out")])


@dataclass
class Kind:
    """How the test reaches one kind: its routes' common prefix, how the owner makes one, and each operation."""

    name: str
    prefix: str  # the route templates of the kind start with it
    make: Callable[[dict[str, Any]], dict[str, str]]  # people -> {"pk": id, other path parameters...}
    operations: dict[tuple[str, str], tuple[str, Any]]  # (method, template) -> (action, body or body(ids))
    roles: tuple[str, ...] = ROLES
    # Operations on other paths that name the object in their query or body (not held to the prefix coverage).
    elsewhere: dict[tuple[str, str], tuple[str, Any]] = field(default_factory=dict)
    # The error code of a 404 where a door names it its own way (/v1: `model_not_found`).
    not_found_codes: dict[tuple[str, str], str] = field(default_factory=dict)


def _workflow(people: dict[str, Any]) -> dict[str, str]:
    client = client_for(people["owner"])
    made = client.post("/api/workflows", {"name": "shared", **SIMPLE}, format="json")
    assert made.status_code == 201, made.content
    pk = made.json()["id"]
    trigger = client.post(f"/api/workflows/{pk}/triggers", {}, format="json")
    assert trigger.status_code == 201, trigger.content
    return {"pk": pk, "trigger_id": trigger.json()["id"], "number": "1"}


def _owner_itself(ids: dict[str, str]) -> dict:
    return {"user": int(ids["owner_id"])}


WORKFLOWS = Kind("workflow", "/api/workflows/{pk}", _workflow, {
    ("get", "/api/workflows/{pk}"): (USE, None),
    ("put", "/api/workflows/{pk}"): (EDIT, {"name": "shared", "description": "changed", **SIMPLE}),
    ("patch", "/api/workflows/{pk}"): (EDIT, {"description": "changed"}),
    ("delete", "/api/workflows/{pk}"): (MANAGE, None),
    ("post", "/api/workflows/{pk}/nodes"): (EDIT, {"id": "wait", "name": "wait", "type": "delay",
                                                   "config": {"delayMs": 0}}),
    ("post", "/api/workflows/{pk}/run"): (USE, {"input": "x"}),
    ("get", "/api/workflows/{pk}/runs"): (USE, None),
    ("get", "/api/workflows/{pk}/versions"): (USE, None),
    ("get", "/api/workflows/{pk}/versions/{number}"): (USE, None),
    ("post", "/api/workflows/{pk}/versions/{number}/restore"): (EDIT, None),
    ("get", "/api/workflows/{pk}/export"): (USE, None),
    # Triggers hold a secret and run as the owner's key: the owner's (and admins') alone.
    ("get", "/api/workflows/{pk}/triggers"): (MANAGE, None),
    ("post", "/api/workflows/{pk}/triggers"): (MANAGE, {}),
    ("patch", "/api/workflows/{pk}/triggers/{trigger_id}"): (MANAGE, {"enabled": False}),
    ("delete", "/api/workflows/{pk}/triggers/{trigger_id}"): (MANAGE, None),
    ("post", "/api/workflows/{pk}/triggers/{trigger_id}/rotate"): (MANAGE, None),
    ("get", "/api/workflows/{pk}/access"): (EDIT, None),
    ("put", "/api/workflows/{pk}/access"): (MANAGE, {"visibility": "private", "grants": []}),
    ("post", "/api/workflows/{pk}/transfer"): (MANAGE, _owner_itself),
})


def _mcp_server(people: dict[str, Any]) -> dict[str, str]:
    """A stored server (the deployment's: no owner). Only its rule is read here, so nothing is started."""
    from mcpbridge.models import McpServer  # a model: after the app registry is ready

    return {"pk": McpServer.objects.create(name="ruled", transport="stdio", command="true").name}


# An MCP server is the deployment's (no owner) and takes viewer grants only: changing it spawns processes.
MCP_SERVERS = Kind("mcp_server", "/api/mcp/servers/{pk}", _mcp_server, {
    ("get", "/api/mcp/servers/{pk}/access"): (EDIT, None),
    ("put", "/api/mcp/servers/{pk}/access"): (MANAGE, {"visibility": "private", "grants": []}),
}, roles=("admin", "viewer", "member", "everyone", "outsider"))


def _collection(people: dict[str, Any]) -> dict[str, str]:
    client = client_for(people["owner"])
    made = client.post("/api/kb/collections", {"name": "handbook"}, format="json")
    assert made.status_code == 201, made.content
    pk = made.json()["id"]
    added = client.post("/api/kb/documents", {"collection": pk, "filename": "leave.md",
                                              "content": "Parental leave is sixteen weeks at full pay."}, format="json")
    assert added.status_code == 201, added.content
    return {"pk": pk, "document": added.json()["id"]}


COLLECTIONS = Kind("collection", "/api/kb/collections/{pk}", _collection, {
    ("get", "/api/kb/collections/{pk}"): (USE, None),
    ("patch", "/api/kb/collections/{pk}"): (EDIT, {"description": "changed"}),
    ("delete", "/api/kb/collections/{pk}"): (MANAGE, None),
    ("get", "/api/kb/collections/{pk}/access"): (EDIT, None),
    ("put", "/api/kb/collections/{pk}/access"): (MANAGE, {"visibility": "private", "grants": []}),
    ("post", "/api/kb/collections/{pk}/transfer"): (MANAGE, _owner_itself),
}, elsewhere={
    ("get", "/api/kb/documents?collection={pk}"): (USE, None),
    ("post", "/api/kb/search"): (USE, lambda ids: {"query": "parental leave", "collections": [ids["pk"]]}),
    ("post", "/api/kb/context"): (USE, lambda ids: {"query": "parental leave", "collections": [ids["pk"]]}),
    ("post", "/api/kb/documents"): (EDIT, lambda ids: {"collection": ids["pk"], "filename": "more.md",
                                                       "content": "Sick leave is paid from the first day."}),
    ("delete", "/api/kb/documents/{document}"): (EDIT, None),
})


def _agent(people: dict[str, Any]) -> dict[str, str]:
    made = client_for(people["owner"]).post("/api/agents", {"slug": "helper", "name": "Helper",
                                                            "instructions": "Answer briefly."}, format="json")
    assert made.status_code == 201, made.content
    return {"pk": str(made.json()["id"]), "slug": "helper", "number": "1"}


def _chat_with(ids: dict[str, str]) -> dict:
    return {"model": f"agent:{ids['slug']}", "messages": [{"role": "user", "content": "hello"}]}


AGENTS = Kind("agent", "/api/agents/{pk}", _agent, {
    ("get", "/api/agents/{pk}"): (USE, None),
    ("patch", "/api/agents/{pk}"): (EDIT, {"description": "changed"}),
    ("delete", "/api/agents/{pk}"): (MANAGE, None),
    ("get", "/api/agents/{pk}/versions"): (USE, None),
    ("get", "/api/agents/{pk}/versions/{number}"): (USE, None),
    ("post", "/api/agents/{pk}/versions/{number}/restore"): (EDIT, None),
    ("get", "/api/agents/{pk}/access"): (EDIT, None),
    ("put", "/api/agents/{pk}/access"): (MANAGE, {"visibility": "private", "grants": []}),
    ("post", "/api/agents/{pk}/transfer"): (MANAGE, _owner_itself),
}, elsewhere={
    # Using an agent is chatting with it, through every door; one the caller holds no role on does not exist.
    ("post", "/v1/chat/completions"): (USE, _chat_with),
    ("post", "/v1/responses"): (USE, lambda ids: {"model": f"agent:{ids['slug']}", "input": "hello"}),
    ("post", "/v1/messages"): (USE, lambda ids: {**_chat_with(ids), "max_tokens": 50}),
    ("post", "/api/sessions"): (USE, lambda ids: {"name": "with the agent", "agent": ids["slug"]}),
    ("post", "/api/scheduler/tasks"): (USE, lambda ids: {"name": "digest", "cron": "0 9 * * *", "prompt": "hi",
                                                         "agent": ids["slug"]}),
}, not_found_codes={("post", "/v1/chat/completions"): "model_not_found",
                    ("post", "/v1/responses"): "model_not_found", ("post", "/v1/messages"): "not_found_error"})
_remote_agent: list[Any] = []  # one A2A agent served for the module's remotes to be refreshed from


def _a2a_remote(people: dict[str, Any]) -> dict[str, str]:
    """A registered remote A2A agent (the deployment's: no owner), its card read from an agent served here."""
    if not _remote_agent:  # started on first use: the other kinds' cases need no agent
        served = Served(RemoteAgent(name="Ruled agent")).start()
        atexit.register(served.stop)
        _remote_agent.append(served)
    made = client_for(people["admin"]).post("/api/a2a/remotes", {"name": "ruled",
                                                                 "url": _remote_agent[0].agent.base_url}, format="json")
    assert made.status_code == 201, made.content
    return {"pk": str(made.json()["id"])}


@pytest.fixture(autouse=True)
def _loopback_fetches(settings):
    """The served agent is on loopback: its card may be fetched (no other kind fetches anything)."""
    settings.AGENTSITE_ALLOW_PRIVATE_FETCH = True


# A remote A2A agent is the deployment's (no owner) and takes viewer grants only, as an MCP server: registering,
# refreshing and removing one is the admins'; a grant lets its holder see it and use its tool.
A2A_REMOTES = Kind("a2a_remote", "/api/a2a/remotes/{pk}", _a2a_remote, {
    ("get", "/api/a2a/remotes/{pk}/access"): (EDIT, None),
    ("put", "/api/a2a/remotes/{pk}/access"): (MANAGE, {"visibility": "private", "grants": []}),
}, roles=("admin", "viewer", "member", "everyone", "outsider"), elsewhere={
    ("get", "/api/a2a/remotes/{pk}"): (USE, None),
    ("post", "/api/a2a/remotes/{pk}/refresh"): (MANAGE, None),
    ("delete", "/api/a2a/remotes/{pk}"): (MANAGE, None),
})
KINDS = [WORKFLOWS, MCP_SERVERS, COLLECTIONS, AGENTS, A2A_REMOTES]


def test_every_registered_kind_is_in_the_matrix():
    assert {kind.name for kind in KINDS} == set(RESOURCES), "add the new shareable kind to KINDS"


@pytest.fixture
def people(django_user_model, admin) -> dict[str, Any]:
    made: dict[str, Any] = {"admin": admin}
    for role in ("owner", "editor", "viewer", "member", "everyone", "outsider"):
        made[role] = django_user_model.objects.create_user(role, password="x-correct-horse-1")
    team = Group.objects.create(name="readers")
    Membership.objects.create(group=team, user=made["member"])
    made["team"] = team
    return made


def _rule_for(kind: Kind, role: str, people: dict[str, Any]) -> tuple[str, list[dict]]:
    """The access rule that gives `role` its role (every rule also names the others, so that the outsider is
    outside a rule that shares with someone)."""
    grants = [{"user": people["viewer"].pk, "role": VIEWER}, {"group": people["team"].pk, "role": VIEWER}]
    if EDITOR in RESOURCES[kind.name].roles:
        grants.append({"user": people["editor"].pk, "role": EDITOR})
    if role == "everyone":
        return EVERYONE, []
    if role == "owner":
        return PRIVATE, []
    return SHARED, grants


def _routes_of(kind: Kind) -> set[tuple[str, str]]:
    found = set()
    for route in url_routes(("/api/",)):
        if route.template.startswith(kind.prefix) and route.view_class is not None:
            found |= {(method, route.template) for method in ("get", "post", "put", "patch", "delete")
                      if hasattr(route.view_class, method)}
        elif route.template.startswith(kind.prefix):  # a function view: what its OPERATIONS say
            found |= {(method, template) for method, template in kind.operations if template == route.template}
    return found


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_every_route_of_a_kind_says_what_it_does(kind):
    assert kind.name in RESOURCES, f"{kind.name} is not registered with organisation.policy"
    undeclared = _routes_of(kind) - set(kind.operations)
    assert not undeclared, f"declare what these {kind.name} routes do (use, edit, manage): {sorted(undeclared)}"
    assert not set(kind.operations) - _routes_of(kind), "declared routes that do not exist"


def _cases():
    for kind in KINDS:
        for (method, template), (action, body) in {**kind.operations, **kind.elsewhere}.items():
            for role in kind.roles:
                yield pytest.param(kind, method, template, action, body, role,
                                   id=f"{kind.name}-{method}-{template.removeprefix(kind.prefix) or '/'}-{role}")


@pytest.mark.parametrize(("kind", "method", "template", "action", "body", "role"), list(_cases()))
def test_each_role_gets_what_can_says(people, kind, method, template, action, body, role):
    ids = kind.make(people)
    registered = RESOURCES[kind.name]
    resource = registered.model._default_manager.get(**{registered.lookup: ids["pk"]})
    visibility, grants = _rule_for(kind, role, people)
    rule = {"visibility": visibility, "grants": grants}
    ruled = client_for(people["admin"]).put(f"{kind.prefix.format(**ids)}/access", rule, format="json")
    assert ruled.status_code == 200, ruled.content
    resource.refresh_from_db()
    user = people[role]
    allowed, held = can(user, action, resource), role_of(user, resource)
    if role in ("owner", "admin"):
        assert held == "owner"
    elif role != "outsider":
        assert held is not None, f"{role} holds no role under {visibility} {grants}"
    ids["owner_id"] = str(people["owner"].pk)
    payload = body(ids) if callable(body) else body
    path = template.format(**ids)
    client = client_for(user)
    response = (getattr(client, method)(path, payload, format="json") if payload is not None
                else getattr(client, method)(path))
    where = f"{method.upper()} {template} as {role} ({held}, {action})"
    if allowed:
        assert 200 <= response.status_code < 300, f"{where}: {response.status_code} {response.content[:300]!r}"
    else:
        want, code = (404, kind.not_found_codes.get((method, template), "not_found")) if held is None \
            else (403, "forbidden")
        assert response.status_code == want, f"{where}: {response.status_code} {response.content[:300]!r}"
        error = response.json()["error"]
        assert error.get("code", error.get("type")) == code, f"{where}: {error}"

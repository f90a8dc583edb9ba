"""Another user's objects named inside a request, not in its path (issue 15, item 4, continued).

The matrix (test_authz_matrix.py) covers ids in paths and query strings. An object can also be named in a
body (a chat attachment, a task's session or workflow), by name (the /v1 model `workflow:<name>`, the tool
`workflow__<name>`), or be a token (a refresh token handed to logout). Each answers as if the object did
not exist, changes nothing of the owner's, and the owner's same request works (the control).
"""

from __future__ import annotations

import pytest

from tests.conftest import PASSWORD
from tests.security.conftest import WORKFLOW_EDGES, WORKFLOW_NODES, objects_made_through_the_api, stream_text

pytestmark = pytest.mark.django_db(transaction=True)

LABEL = "orchard-owner"


@pytest.fixture
def mine(owner_client) -> dict[str, str]:
    return objects_made_through_the_api(owner_client, label=LABEL)


def _runs(client, workflow_id: str) -> list[str]:
    return [run["id"] for run in client.get(f"/api/workflows/{workflow_id}/runs").json()["results"]]


def _error_code(response) -> str:
    return response.json()["error"]["code"]


def test_a_chat_cannot_attach_another_users_upload(mine, owner_client, other_client):
    session = other_client.post("/api/sessions", {}, format="json").json()["id"]
    response = other_client.post(f"/api/sessions/{session}/chat", {"message": "what is in it?", "attachments": [
        mine["upload"]]}, format="json")
    assert response.status_code == 404 and _error_code(response) == "not_found"
    assert "attachments" in response.json()["error"]["details"]
    assert other_client.get(f"/api/sessions/{session}/messages").json()["count"] == 0  # nothing was stored
    mine_too = owner_client.post(f"/api/sessions/{mine['session']}/chat", {"message": "and this?", "attachments": [
        mine["upload"]]}, format="json")
    assert mine_too.status_code == 200 and "event: done" in stream_text(mine_too)


@pytest.mark.parametrize("field", ["session_id", "workflow_id"])
def test_a_task_cannot_name_another_users_session_or_workflow(mine, owner_client, other_client, field):
    target = mine["session" if field == "session_id" else "workflow"]
    task = {"name": "borrowed", "cron": "0 9 * * *", "prompt": "hello"}
    created = other_client.post("/api/scheduler/tasks", {**task, field: target}, format="json")
    assert created.status_code == 400 and field in created.json()["error"]["details"], created.content
    own = other_client.post("/api/scheduler/tasks", task, format="json").json()
    for method in ("put", "patch"):
        changed = getattr(other_client, method)(f"/api/scheduler/tasks/{own['id']}", {**task, field: target},
                                                format="json")
        assert changed.status_code == 400 and field in changed.json()["error"]["details"], f"{method}"
    assert other_client.get("/api/scheduler/tasks").json()["results"] == [own]
    control = owner_client.post("/api/scheduler/tasks", {**task, field: target}, format="json")
    assert control.status_code == 201 and control.json()[field] == target


def test_v1_cannot_run_or_list_another_users_workflow_as_a_model(mine, owner_client, other_client, anon_client):
    runs = _runs(owner_client, mine["workflow"])
    chat = {"model": f"workflow:{LABEL}", "messages": [{"role": "user", "content": "run it"}]}
    for client, who in ((other_client, "another user"), (anon_client, "no token (compat_auth public)")):
        response = client.post("/v1/chat/completions", chat, format="json")
        assert response.status_code == 404, f"{who}: {response.status_code}"
        assert response.json()["error"]["code"] == "model_not_found", who
        assert f"workflow:{LABEL}" not in {model["id"] for model in client.get("/v1/models").json()["data"]}, who
    assert _runs(owner_client, mine["workflow"]) == runs
    assert owner_client.post("/v1/chat/completions", chat, format="json").status_code == 200
    assert f"workflow:{LABEL}" in {model["id"] for model in owner_client.get("/v1/models").json()["data"]}


def test_the_tool_of_another_users_workflow_is_neither_listed_nor_callable(mine, owner_client, other_client):
    runs = _runs(owner_client, mine["workflow"])
    call = {"server": "workflows", "tool": f"workflow__{LABEL}", "arguments": {"input": "run it"}}
    response = other_client.post("/api/mcp/call", call, format="json")
    assert response.status_code == 404 and _error_code(response) == "not_found"
    assert f"workflow__{LABEL}" not in {item["tool"]["name"] for item in other_client.get("/api/mcp/tools").json()[
        "tools"]}
    assert _runs(owner_client, mine["workflow"]) == runs
    control = owner_client.post("/api/mcp/call", call, format="json")
    assert control.status_code == 200 and control.json()["is_error"] is False
    assert len(_runs(owner_client, mine["workflow"])) == len(runs) + 1


def test_a_workflow_cannot_call_another_users_workflow_through_a_tool_node(mine, owner_client, other_client):
    runs = _runs(owner_client, mine["workflow"])
    nodes = [{"id": "in", "name": "in", "type": "input", "config": {}},
             {"id": "call", "name": "call", "type": "tool", "config": {"toolName": f"workflow__{LABEL}",
                                                                       "toolArgs": {"input": "${input}"}}},
             {"id": "out", "name": "out", "type": "output", "config": {}}]
    edges = [{"from": "in", "to": "call"}, {"from": "call", "to": "out"}]
    created = other_client.post("/api/workflows", {"name": "borrower", "nodes": nodes, "edges": edges}, format="json")
    if created.status_code == 201:  # saved (tools are looked up when the node runs): the run must fail there
        run = other_client.post(f"/api/workflows/{created.json()['id']}/run", {"input": "x"}, format="json").json()
        assert run["status"] == "error" and run["error"]["node"] == "call", run
    else:
        assert created.status_code == 400, created.content
    assert _runs(owner_client, mine["workflow"]) == runs
    own = owner_client.post("/api/workflows", {"name": "caller", "nodes": nodes, "edges": edges}, format="json")
    assert own.status_code == 201, own.content
    run = owner_client.post(f"/api/workflows/{own.json()['id']}/run", {"input": "x"}, format="json").json()
    assert run["status"] == "success", run


def test_workflow_names_are_per_owner_so_a_taken_name_tells_nobody_else_anything(mine, owner_client, other_client):
    body = {"name": LABEL, "nodes": WORKFLOW_NODES, "edges": WORKFLOW_EDGES}
    assert other_client.post("/api/workflows", body, format="json").status_code == 201
    exported = owner_client.get(f"/api/workflows/{mine['workflow']}/export").json()
    other_client.delete(f"/api/workflows/{other_client.get('/api/workflows').json()['results'][0]['id']}")
    assert other_client.post("/api/workflows/import", exported, format="json").status_code == 201
    assert owner_client.post("/api/workflows/import", exported, format="json").status_code == 409  # the control


def test_a_chat_turn_of_another_user_does_not_see_the_owners_knowledge(mine, owner_client, other_client):
    question = {"message": "Tell me about the orchard and its pear trees."}
    session = other_client.post("/api/sessions", {}, format="json").json()["id"]
    reply = stream_text(other_client.post(f"/api/sessions/{session}/chat", question, format="json"))
    assert "event: done" in reply and LABEL not in reply
    reply = stream_text(owner_client.post(f"/api/sessions/{mine['session']}/chat", question, format="json"))
    assert LABEL in reply  # the control: the owner's turn quotes the owner's document


def test_another_users_refresh_token_cannot_be_revoked_by_logging_out_with_it(owner_client, other_client, owner):
    pair = owner_client.post("/api/auth/login", {"username": owner.username, "password": PASSWORD},
                             format="json").json()
    response = other_client.post("/api/auth/logout", {"refresh": pair["refresh"]}, format="json")
    assert response.status_code == 400 and "refresh" in response.json()["error"]["details"]
    assert owner_client.post("/api/auth/refresh", {"refresh": pair["refresh"]}, format="json").status_code == 200

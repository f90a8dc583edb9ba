"""/api/workflows over the API client: CRUD, validation on every save, ownership, export/import, runs."""

from __future__ import annotations

import pytest

from tests.workflows.conftest import graph, node
from workflows.models import WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True)

CHAIN = graph(node("start", "input"), node("wait", "delay", delayMs=0), node("out", "output"),
              edges=[("start", "wait"), ("wait", "out")])


def create(client, name="chain", data=CHAIN, **extra):
    return client.post("/api/workflows", {"name": name, **data, **extra}, format="json")


def test_create_returns_the_workflow_with_its_nodes_and_edges(owner_client):
    response = create(owner_client, description="three steps")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["name"] == "chain" and body["description"] == "three steps"
    assert [(item["id"], item["type"], item["name"]) for item in body["nodes"]] == [
        ("start", "input", "start"), ("wait", "delay", "wait"), ("out", "output", "out")]
    assert body["nodes"][1]["config"] == {"delayMs": 0} and body["nodes"][0]["position"] == {"x": 0.0, "y": 0.0}
    assert body["edges"] == [{"from": "start", "to": "wait"}, {"from": "wait", "to": "out"}]
    assert owner_client.get(f"/api/workflows/{body['id']}").json() == body


def test_the_list_has_no_nodes_and_only_the_callers_workflows(owner_client, other_client):
    create(owner_client)
    create(other_client, name="theirs")
    listed = owner_client.get("/api/workflows").json()
    assert listed["count"] == 1 and listed["results"][0]["name"] == "chain"
    assert "nodes" not in listed["results"][0]


def test_an_empty_workflow_gets_an_input_node(owner_client):
    body = owner_client.post("/api/workflows", {"name": "empty"}, format="json").json()
    assert [item["type"] for item in body["nodes"]] == ["input"]


def test_missing_node_ids_are_assigned(owner_client):
    body = owner_client.post("/api/workflows", {"name": "ids", "nodes": [{"type": "input", "name": "in"}]},
                             format="json").json()
    assert body["nodes"][0]["id"]


@pytest.mark.parametrize(("nodes", "edges", "where"), [
    ([node("a", "input"), {"id": "b", "name": "a", "type": "output"}], [], "node:b"),
    ([node("a", "input"), node("b", "magic")], [], "node:b"),
    ([node("a", "input"), node("b", "delay", delayMs="5")], [], "node:b"),
    ([node("a", "input"), node("b", "delay", delayMs=5, colour="red")], [], "node:b"),
    ([node("a", "input"), node("b", "llm")], [], "node:b"),
    ([node("a", "input"), node("b", "llm", prompt="Sum up ${missing}")], [], "node:b"),
    ([node("a", "input"), node("b", "tool", toolName="t", toolArgs={"q": ["${nowhere}"]})], [], "node:b"),
    ([node("a", "input"), node("b", "output", outputFormat="xml")], [], "node:b"),
    ([node("a", "input"), node("b", "delay", delayMs=1, retry={"max": 11})], [], "node:b"),
    ([node("a", "input"), node("b", "delay", delayMs=1, onError="ignore")], [], "node:b"),
    ([node("a", "input"), node("b", "condition", condition="true", trueBranch="zz")], [], "node:b"),
    ([node("a", "input"), node("b", "output")], [("a", "zz")], "edge:a->zz"),
    ([node("a", "input"), node("b", "output")], [("a", "a")], "edge:a->a"),
    ([node("a", "input"), node("b", "output")], [("a", "b"), ("a", "b")], "edge:a->b"),
    ([node("a", "input"), node("b", "input")], [], "workflow"),
    ([node("b", "output")], [], "workflow"),
])
def test_an_invalid_graph_is_refused_naming_the_node_or_edge_on_every_save(owner_client, nodes, edges, where):
    data = graph(*nodes, edges=edges)
    created = create(owner_client, name="bad", data=data)
    assert created.status_code == 400, created.json()
    assert created.json()["error"]["code"] == "invalid" and where in created.json()["error"]["details"]

    workflow = create(owner_client, name="good").json()
    updated = owner_client.patch(f"/api/workflows/{workflow['id']}", data, format="json")
    assert updated.status_code == 400 and where in updated.json()["error"]["details"]
    imported = owner_client.post("/api/workflows/import", {"format": "agentsite.workflow", "version": 1,
                                                           "name": "imported", **data}, format="json")
    assert imported.status_code == 400 and where in imported.json()["error"]["details"]
    assert owner_client.get(f"/api/workflows/{workflow['id']}").json()["nodes"] == workflow["nodes"]


def test_adding_a_node_is_validated_with_the_whole_graph(owner_client):
    workflow = create(owner_client).json()
    added = owner_client.post(f"/api/workflows/{workflow['id']}/nodes",
                              {"type": "llm", "name": "summary", "config": {"prompt": "Sum up ${wait}"},
                               "position": {"x": 10, "y": 20}}, format="json")
    assert added.status_code == 201, added.json()
    assert added.json()["name"] == "summary" and added.json()["position"] == {"x": 10.0, "y": 20.0}
    duplicate = owner_client.post(f"/api/workflows/{workflow['id']}/nodes", {"type": "output", "name": "out"},
                                  format="json")
    assert duplicate.status_code == 400
    assert len(owner_client.get(f"/api/workflows/{workflow['id']}").json()["nodes"]) == 4


def test_names_are_unique_per_owner(owner_client, other_client):
    assert create(owner_client).status_code == 201
    taken = create(owner_client)
    assert taken.status_code == 409 and taken.json()["error"]["code"] == "conflict"
    assert create(other_client).status_code == 201
    assert create(owner_client, name="has spaces").status_code == 400


def test_patch_and_put_change_name_description_and_graph(owner_client):
    workflow = create(owner_client).json()
    renamed = owner_client.patch(f"/api/workflows/{workflow['id']}", {"name": "renamed"}, format="json").json()
    assert renamed["name"] == "renamed" and renamed["nodes"] == workflow["nodes"]
    replaced = owner_client.put(f"/api/workflows/{workflow['id']}",
                                {"name": "renamed", **graph(node("in", "input"))}, format="json").json()
    assert [item["name"] for item in replaced["nodes"]] == ["in"] and replaced["edges"] == []


def test_another_users_workflow_and_runs_are_not_found(owner_client, other_client):
    workflow = create(owner_client).json()
    run = owner_client.post(f"/api/workflows/{workflow['id']}/run", {"input": "x"}, format="json").json()
    base = f"/api/workflows/{workflow['id']}"
    for response in (other_client.get(base), other_client.patch(base, {"name": "x"}, format="json"),
                     other_client.delete(base), other_client.get(f"{base}/runs"), other_client.get(f"{base}/export"),
                     other_client.post(f"{base}/nodes", {"type": "output", "name": "o"}, format="json"),
                     other_client.post(f"{base}/run", {"input": "x"}, format="json"),
                     other_client.get(f"/api/workflows/runs/{run['id']}")):
        assert response.status_code == 404, response
        assert response.json()["error"]["code"] == "not_found"
    assert owner_client.get(base).status_code == 200


def test_a_synchronous_run_answers_the_finished_run_and_is_listed(owner_client):
    workflow = create(owner_client).json()
    response = owner_client.post(f"/api/workflows/{workflow['id']}/run", {"input": "hello"}, format="json")
    assert response.status_code == 200, response.content
    run = response.json()
    assert run["status"] == "success" and run["output"] == "hello" and run["error"] is None
    assert run["outputs"] == {"start": "hello", "wait": "hello", "out": "hello"}
    assert [(entry["node"], entry["status"], entry["attempts"]) for entry in run["trace"]] == [
        ("start", "success", 1), ("wait", "success", 1), ("out", "success", 1)]
    assert run["started_at"] and run["finished_at"] and run["workflow_id"] == workflow["id"]
    assert owner_client.get(f"/api/workflows/runs/{run['id']}").json() == run
    owner_client.post(f"/api/workflows/{workflow['id']}/run", {"input": "second"}, format="json")
    listed = owner_client.get(f"/api/workflows/{workflow['id']}/runs").json()["results"]
    assert [item["input"] for item in listed] == ["second", "hello"]


def test_a_run_keeps_the_graph_it_ran(owner_client):
    workflow = create(owner_client).json()
    run = owner_client.post(f"/api/workflows/{workflow['id']}/run", {"input": "hi"}, format="json").json()
    owner_client.put(f"/api/workflows/{workflow['id']}", graph(node("other", "input")), format="json")
    record = WorkflowRun.objects.get(pk=run["id"])
    assert [item["name"] for item in record.graph["nodes"]] == ["start", "wait", "out"]
    assert owner_client.get(f"/api/workflows/runs/{run['id']}").json() == run


def test_an_async_run_is_queued_with_202_and_runs_in_the_task_queue(owner_client):
    workflow = create(owner_client).json()
    response = owner_client.post(f"/api/workflows/{workflow['id']}/run", {"input": "later", "async": True},
                                 format="json")
    assert response.status_code == 202 and response.json()["status"] == "queued"
    # Q_CLUSTER sync in unit tests: the task ran inline after commit (the real cluster has its own test).
    stored = owner_client.get(f"/api/workflows/runs/{response.json()['id']}").json()
    assert stored["status"] == "success" and stored["output"] == "later"


@pytest.mark.parametrize("body", [{}, {"input": 5}, {"input": "x", "async": "yes"}, {"input": "x" * 100_001}])
def test_a_bad_run_request_is_a_400_and_stores_no_run(owner_client, body):
    workflow = create(owner_client).json()
    response = owner_client.post(f"/api/workflows/{workflow['id']}/run", body, format="json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid"
    assert not WorkflowRun.objects.exists()


def test_export_and_import_round_trip(owner_client):
    workflow = create(owner_client, description="d").json()
    exported = owner_client.get(f"/api/workflows/{workflow['id']}/export").json()
    assert exported["format"] == "agentsite.workflow" and exported["version"] == 1
    assert exported["nodes"] == workflow["nodes"] and exported["edges"] == workflow["edges"]
    taken = owner_client.post("/api/workflows/import", exported, format="json")
    assert taken.status_code == 409
    imported = owner_client.post("/api/workflows/import", {**exported, "name": "copy"}, format="json")
    assert imported.status_code == 201
    assert imported.json()["nodes"] == workflow["nodes"] and imported.json()["description"] == "d"


@pytest.mark.parametrize(("document", "field"), [
    ({"format": "n8n", "version": 1}, "format"), ({"format": "agentsite.workflow", "version": 2}, "version"),
    ({"format": "agentsite.workflow", "version": "1"}, "version"),
    ({"format": "agentsite.workflow", "version": 1, "extra": 1}, "fields")])
def test_import_refuses_a_bad_or_newer_document(owner_client, document, field):
    response = owner_client.post("/api/workflows/import", {"name": "x", "nodes": [], "edges": [], **document},
                                 format="json")
    assert response.status_code == 400 and field in response.json()["error"]["details"]
    if document.get("version") == 2:
        assert "newer" in response.json()["error"]["message"]


def test_an_import_may_leave_out_node_config_as_a_created_workflow_may(owner_client):
    document = {"format": "agentsite.workflow", "version": 1, "name": "bare",
                "nodes": [{"id": "in", "type": "input", "name": "input"}], "edges": []}
    imported = owner_client.post("/api/workflows/import", document, format="json")
    assert imported.status_code == 201, imported.content
    assert imported.json()["nodes"][0]["config"] == {}


def test_nul_characters_are_refused_wherever_workflow_text_is_stored(owner_client):
    """PostgreSQL cannot store a NUL (SQLite can): refused alike on both, naming where, with nothing stored."""
    code = [{"id": "in", "type": "input", "name": "input"},
            {"id": "c", "type": "code", "name": "c", "config": {"code": "return 1;", "notes": ["a\x00b"]}}]
    created = owner_client.post("/api/workflows", {"name": "nul", "nodes": code, "edges": []}, format="json")
    assert created.status_code == 400 and "NUL" in created.json()["error"]["message"], created.content
    imported = owner_client.post("/api/workflows/import", {
        "format": "agentsite.workflow", "version": 1, "name": "nul", "description": "a\x00b", "nodes": [],
        "edges": []}, format="json")
    assert imported.status_code == 400 and "description" in imported.json()["error"]["details"]
    assert owner_client.get("/api/workflows").json()["count"] == 0


def test_deleting_a_workflow_removes_its_runs(owner_client):
    workflow = create(owner_client).json()
    owner_client.post(f"/api/workflows/{workflow['id']}/run", {"input": "x"}, format="json")
    assert owner_client.delete(f"/api/workflows/{workflow['id']}").status_code == 204
    assert not WorkflowRun.objects.exists()


def test_runs_left_running_by_a_dead_process_are_marked_error_at_start_and_a_live_ones_are_not(owner_client):
    from agentsite.core.processes import current_process_id
    from agentsite.core.startup import run_start_hooks
    from tests.foundation.test_processes import dead_process

    workflow = create(owner_client).json()
    crashed, live = (owner_client.post(f"/api/workflows/{workflow['id']}/run", {"input": "x"}, format="json").json()
                     for _ in range(2))
    WorkflowRun.objects.filter(pk=crashed["id"]).update(status="running", finished_at=None, process=dead_process())
    WorkflowRun.objects.filter(pk=live["id"]).update(status="running", finished_at=None,
                                                     process=current_process_id())
    assert run_start_hooks()["work left running by stopped processes"]["workflow runs"] == 1
    stored = owner_client.get(f"/api/workflows/runs/{crashed['id']}").json()
    assert stored["status"] == "error" and "stopped" in stored["error"]["message"]
    assert owner_client.get(f"/api/workflows/runs/{live['id']}").json()["status"] == "running"


def test_a_workflow_that_reaches_itself_through_its_tool_stops_at_the_nesting_limit(owner_client):
    again = node("again", "tool", toolName="workflow__loop", toolArgs={"input": "${input}"})
    loop = graph(node("start", "input"), again, edges=[("start", "again")])
    workflow = create(owner_client, name="loop", data=loop).json()
    run = owner_client.post(f"/api/workflows/{workflow['id']}/run", {"input": "x"}, format="json").json()
    assert run["status"] == "error" and "nest" in run["error"]["message"]
    assert WorkflowRun.objects.count() == 5  # the outer run and four nested ones (the fifth level refuses)


def test_one_workflow_calls_another_through_its_tool(owner_client):
    create(owner_client, name="inner", data=graph(node("start", "input"), node("out", "output"),
                                                  edges=[("start", "out")]))
    outer = create(owner_client, name="outer", data=graph(
        node("start", "input"), node("call", "tool", toolName="workflow__inner", toolArgs={"input": "<${input}>"}),
        edges=[("start", "call")])).json()
    run = owner_client.post(f"/api/workflows/{outer['id']}/run", {"input": "x"}, format="json").json()
    assert run["status"] == "success" and run["outputs"]["call"] == "<x>"


@pytest.mark.parametrize(("kind", "config"), [("code", {"code": "return (;"}),
                                              ("condition", {"condition": "input ==="})])
def test_javascript_that_does_not_compile_is_refused_naming_the_node(owner_client, kind, config):
    data = graph(node("start", "input"), {"id": "js", "name": "js", "type": kind, "config": config},
                 edges=[("start", "js")])
    response = create(owner_client, name="js", data=data)
    assert response.status_code == 400
    assert "node:js" in response.json()["error"]["details"]
    assert "compile" in response.json()["error"]["details"]["node:js"][0]


def test_compiling_on_save_never_runs_the_code(owner_client):
    data = graph(node("start", "input"), node("loop", "code", code="while (true) {}"), edges=[("start", "loop")])
    assert create(owner_client, name="js", data=data).status_code == 201


EVERY_TYPE = graph(
    {"id": "in", "name": "in", "type": "input", "position": {"x": 1, "y": 2}},
    node("ask", "llm", prompt="About ${in}", model="smart", retry={"max": 2, "backoffMs": 10}),
    node("look", "tool", toolName="web_search", toolArgs={"query": "${ask}"}, onError="continue"),
    {"id": "gate", "name": "gate", "type": "condition", "config": {"condition": "!!input", "trueBranch": "calc",
                                                                    "falseBranch": "pause"}},
    node("calc", "code", code="return 1;"), node("pause", "delay", delayMs=5),
    node("out", "output", outputFormat="markdown"),
    edges=[("in", "ask"), ("ask", "look"), ("look", "gate"), ("gate", "calc"), ("gate", "pause"), ("calc", "out"),
           ("pause", "out")])


def test_export_and_import_round_trip_every_node_type(owner_client):
    from tests.catalogue import closed_url, two_upstreams, use_catalogue

    with use_catalogue(two_upstreams(closed_url(), closed_url())):  # the llm node's model is an alias of it
        workflow = create(owner_client, name="all", data=EVERY_TYPE).json()
        exported = owner_client.get(f"/api/workflows/{workflow['id']}/export").json()
        copy = owner_client.post("/api/workflows/import", {**exported, "name": "all-copy"}, format="json").json()
    assert {item["type"] for item in exported["nodes"]} == {"input", "llm", "tool", "condition", "code", "delay",
                                                            "output"}
    again = owner_client.get(f"/api/workflows/{copy['id']}/export").json()
    assert {**again, "name": "all"} == exported
    assert exported["nodes"][0]["position"] == {"x": 1.0, "y": 2.0}


def test_run_data_is_exactly_what_the_run_serializer_gives(owner_client):
    from workflows.api import RunSerializer, run_data

    failing = graph(node("in", "input"), node("boom", "code", code="throw new Error('no');"), node("out", "output"),
                    edges=[("in", "boom"), ("boom", "out")])
    ids = [create(owner_client, name=name, data=data).json()["id"] for name, data in (("chain", CHAIN),
                                                                                       ("fails", failing))]
    for workflow_id in ids:
        owner_client.post(f"/api/workflows/{workflow_id}/run", {"input": "7"}, format="json")
        owner_client.post(f"/api/workflows/{workflow_id}/run", {"input": "7", "async": True}, format="json")
    WorkflowRun.objects.create(workflow_id=ids[0], owner=WorkflowRun.objects.first().owner, input="", graph={},
                               status="queued")  # never started
    runs = list(WorkflowRun.objects.all())
    assert {run.status for run in runs} >= {"success", "error", "queued"}
    for run in runs:
        assert run_data(run) == dict(RunSerializer(run).data)

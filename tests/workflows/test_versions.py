"""Versions (issue 31 item 3): every save makes an immutable version; runs record and run one; restore; pins."""

from __future__ import annotations

import pytest

from tests.workflows.conftest import graph, node
from workflows.models import WorkflowRun, WorkflowVersion

pytestmark = pytest.mark.django_db


def calc(expression: str) -> dict:
    return graph(node("in", "input"), node("calc", "code", code=f"return {expression};"), node("out", "output"),
                 edges=[("in", "calc"), ("calc", "out")])


def create(client, name: str = "calc") -> str:
    response = client.post("/api/workflows", {"name": name, **calc("Number(input) + 1")}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["version"] == 1
    return response.json()["id"]


def edit(client, workflow_id: str, expression: str) -> dict:
    response = client.patch(f"/api/workflows/{workflow_id}", calc(expression), format="json")
    assert response.status_code == 200, response.content
    return response.json()


def run(client, workflow_id: str, **extra) -> dict:
    response = client.post(f"/api/workflows/{workflow_id}/run", {"input": "41", **extra}, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def test_each_save_makes_the_next_version_and_old_ones_stay_as_they_were(owner_client):
    workflow_id = create(owner_client)
    assert edit(owner_client, workflow_id, "Number(input) * 2")["version"] == 2
    added = owner_client.post(f"/api/workflows/{workflow_id}/nodes",
                              {"id": "note", "type": "delay", "name": "note", "config": {"delayMs": 0}}, format="json")
    assert added.status_code == 201
    renamed = owner_client.patch(f"/api/workflows/{workflow_id}", {"description": "doubles"}, format="json")
    assert renamed.json()["version"] == 4
    listed = owner_client.get(f"/api/workflows/{workflow_id}/versions").json()["results"]
    assert [item["number"] for item in listed] == [4, 3, 2, 1]
    assert [item["note"] for item in listed] == ["update", "node note added", "update", "create"]
    first = owner_client.get(f"/api/workflows/{workflow_id}/versions/1").json()
    assert first["nodes"][1]["config"]["code"] == "return Number(input) + 1;"
    assert [edge["to"] for edge in first["edges"]] == ["calc", "out"]
    third = owner_client.get(f"/api/workflows/{workflow_id}/versions/3").json()
    assert "note" in [item["name"] for item in third["nodes"]] and third["description"] == ""
    assert owner_client.get(f"/api/workflows/{workflow_id}/versions/9").status_code == 404


def test_a_failed_save_makes_no_version(owner_client):
    workflow_id = create(owner_client)
    bad = owner_client.patch(f"/api/workflows/{workflow_id}", {"edges": [{"from": "in", "to": "nowhere"}]},
                             format="json")
    assert bad.status_code == 400
    assert WorkflowVersion.objects.filter(workflow_id=workflow_id).count() == 1


def test_runs_record_their_version_and_a_pinned_run_runs_the_old_graph(owner_client):
    workflow_id = create(owner_client)
    first = run(owner_client, workflow_id)
    assert (first["version"], first["output"]) == (1, "42")
    edit(owner_client, workflow_id, "Number(input) * 2")
    latest = run(owner_client, workflow_id)
    assert (latest["version"], latest["output"]) == (2, "82")
    pinned = run(owner_client, workflow_id, version=1)
    assert (pinned["version"], pinned["output"]) == (1, "42")
    assert WorkflowRun.objects.get(pk=pinned["id"]).graph["nodes"][1]["config"]["code"] == "return Number(input) + 1;"
    missing = owner_client.post(f"/api/workflows/{workflow_id}/run", {"input": "1", "version": 7}, format="json")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


def test_restore_makes_a_new_version_equal_to_the_old_one(owner_client):
    workflow_id = create(owner_client)
    edit(owner_client, workflow_id, "Number(input) * 2")
    restored = owner_client.post(f"/api/workflows/{workflow_id}/versions/1/restore")
    assert restored.status_code == 200, restored.content
    assert restored.json()["version"] == 3
    one = owner_client.get(f"/api/workflows/{workflow_id}/versions/1").json()
    three = owner_client.get(f"/api/workflows/{workflow_id}/versions/3").json()
    assert (one["nodes"], one["edges"]) == (three["nodes"], three["edges"])
    assert three["note"] == "restore of version 1"
    assert run(owner_client, workflow_id)["output"] == "42"
    assert owner_client.post(f"/api/workflows/{workflow_id}/versions/8/restore").status_code == 404


def test_another_users_versions_are_not_found(owner_client, other_client):
    workflow_id = create(owner_client)
    for path in ("versions", "versions/1"):
        assert other_client.get(f"/api/workflows/{workflow_id}/{path}").status_code == 404
    assert other_client.post(f"/api/workflows/{workflow_id}/versions/1/restore").status_code == 404


def test_export_carries_the_version_and_import_accepts_it(owner_client):
    workflow_id = create(owner_client)
    edit(owner_client, workflow_id, "Number(input) * 2")
    document = owner_client.get(f"/api/workflows/{workflow_id}/export").json()
    assert document["workflow_version"] == 2 and document["version"] == 1
    document["name"] = "copy"
    imported = owner_client.post("/api/workflows/import", document, format="json")
    assert imported.status_code == 201, imported.content
    assert imported.json()["version"] == 1
    notes = owner_client.get(f"/api/workflows/{imported.json()['id']}/versions").json()["results"]
    assert notes[0]["note"] == "import of version 2"


def test_v1_model_at_a_version(owner_client):
    workflow_id = create(owner_client)
    edit(owner_client, workflow_id, "Number(input) * 2")

    def ask(model: str):
        return owner_client.post("/v1/chat/completions", {"model": model, "messages": [
            {"role": "user", "content": "41"}]}, format="json")

    latest, pinned = ask("workflow:calc"), ask("workflow:calc@1")
    assert latest.status_code == 200 and pinned.status_code == 200, (latest.content, pinned.content)
    assert latest.json()["choices"][0]["message"]["content"] == "82"
    assert pinned.json()["choices"][0]["message"]["content"] == "42"
    assert WorkflowRun.objects.filter(version=1).count() == 1
    for bad in ("workflow:calc@3", "workflow:calc@x", "workflow:calc@0"):
        response = ask(bad)
        assert response.status_code == 404 and response.json()["error"]["code"] == "model_not_found", bad


def test_restoring_a_version_whose_graph_is_no_longer_valid_is_a_400_that_makes_no_version(owner_client):
    from agentsite.agent.routing import Catalogue, Connection
    from tests.catalogue import closed_url, two_upstreams, use_catalogue

    def llm(model: str) -> dict:
        return graph(node("in", "input"), node("ask", "llm", prompt="Say: ${input}", model=model),
                     node("out", "output"), edges=[("in", "ask"), ("ask", "out")])

    with use_catalogue(two_upstreams(closed_url(), closed_url())):
        made = owner_client.post("/api/workflows", {"name": "asks", **llm("hosted/big")}, format="json")
        assert made.status_code == 201, made.content
        workflow_id = made.json()["id"]
        assert owner_client.patch(f"/api/workflows/{workflow_id}", llm("small"), format="json").status_code == 200
    # The hosted connection (and the alias over it) has since left the catalogue.
    only_local = Catalogue([Connection("local", "openai", closed_url(), models=("small",), timeout_s=5.0)], [],
                           default_connection="local")
    with use_catalogue(only_local):
        refused = owner_client.post(f"/api/workflows/{workflow_id}/versions/1/restore")
        assert refused.status_code == 400, refused.content
        assert refused.json()["error"]["code"] == "invalid" and list(refused.json()["error"]["details"]) == ["node:ask"]
        assert WorkflowVersion.objects.filter(workflow_id=workflow_id).count() == 2
        current = owner_client.get(f"/api/workflows/{workflow_id}").json()
        assert current["version"] == 2 and current["nodes"][1]["config"]["model"] == "small"
        restored = owner_client.post(f"/api/workflows/{workflow_id}/versions/2/restore")
        assert restored.status_code == 200 and restored.json()["version"] == 3

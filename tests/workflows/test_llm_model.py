"""An `llm` node's `model` (issue 26, item 4): a catalogue entry or alias, checked on every save (unknown: 400
naming the node), and used by its runs through the router (an alias falls back past a stopped upstream)."""

from __future__ import annotations

import pytest

from tests.catalogue import closed_url, two_upstreams, use_catalogue
from tests.fakes.llm import Text
from tests.workflows.conftest import graph, node
from workflows.models import Workflow, WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True)


def llm_graph(model: str) -> dict:
    return graph(node("start", "input"), node("ask", "llm", prompt="Say: ${input}", model=model),
                 node("out", "output"), edges=[("start", "ask"), ("ask", "out")])


@pytest.fixture
def catalogue(fake_openai):
    with use_catalogue(two_upstreams(closed_url(), fake_openai.base_url)) as settings:
        yield settings


@pytest.mark.parametrize("model", ["nope", "hosted/nope", "gone/big"])
def test_an_unknown_model_is_refused_on_every_save_naming_the_node(owner_client, catalogue, model):
    created = owner_client.post("/api/workflows", {"name": "w", **llm_graph(model)}, format="json")
    assert created.status_code == 400, created.json()
    error = created.json()["error"]
    assert error["code"] == "invalid" and list(error["details"]) == ["node:ask"]
    assert "Node 'ask' (llm)" in error["message"] and repr(model) in error["message"]
    assert not Workflow.objects.exists()

    workflow = owner_client.post("/api/workflows", {"name": "w", **llm_graph("smart")}, format="json").json()
    assert workflow["nodes"][1]["config"]["model"] == "smart"
    changed = owner_client.patch(f"/api/workflows/{workflow['id']}", llm_graph(model), format="json")
    assert changed.status_code == 400 and list(changed.json()["error"]["details"]) == ["node:ask"]
    added = owner_client.post(f"/api/workflows/{workflow['id']}/nodes",
                              {"id": "more", "type": "llm", "name": "more", "config": {"prompt": "x", "model": model}},
                              format="json")
    assert added.status_code == 400 and list(added.json()["error"]["details"]) == ["node:more"]
    exported = owner_client.get(f"/api/workflows/{workflow['id']}/export").json()
    exported["nodes"][1]["config"]["model"] = model
    imported = owner_client.post("/api/workflows/import", {**exported, "name": "copy"}, format="json")
    assert imported.status_code == 400 and "node:ask" in imported.json()["error"]["details"]
    assert owner_client.get(f"/api/workflows/{workflow['id']}").json()["nodes"][1]["config"]["model"] == "smart"


def test_catalogue_entries_aliases_and_bare_models_of_the_default_connection_are_accepted(owner_client, catalogue):
    for index, model in enumerate(["smart", "hosted/big", "local/small", "small", ""]):
        created = owner_client.post("/api/workflows", {"name": f"w{index}", **llm_graph(model)}, format="json")
        assert created.status_code == 201, (model, created.json())


@pytest.mark.parametrize("queued", [False, True])
def test_a_run_answers_through_the_alias_from_the_upstream_still_up(owner_client, catalogue, fake_openai, queued):
    workflow = owner_client.post("/api/workflows", {"name": "w", **llm_graph("smart")}, format="json").json()
    fake_openai.script(Text("from the local one"))
    answer = owner_client.post(f"/api/workflows/{workflow['id']}/run", {"input": "hi", "async": queued},
                               format="json")
    assert answer.status_code == (202 if queued else 200)
    run = WorkflowRun.objects.get(pk=answer.json()["id"])
    assert (run.status, run.output) == ("success", "from the local one")
    # hosted/big refused the connection; local/small answered, with its own model name.
    assert [body["model"] for body in fake_openai.bodies()] == ["small"]

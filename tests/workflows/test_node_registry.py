"""Adding a node type is one class registered in the node registry: it is then listed by GET /api/meta (so the
dashboard's form offers it), validated on save, and run by the engine, with no other file touched."""

from __future__ import annotations

from typing import Any

import pytest

from tests.workflows.conftest import graph, node
from workflows.graph import Node
from workflows.nodes import ConfigKey, NodeType, RunContext, as_text, register_node_type, unregister_node_type

pytestmark = pytest.mark.django_db(transaction=True)


class ShoutNode(NodeType):
    """The fixture's node type: its input in capitals, `times` over."""

    name = "shout"
    label = "Shout"
    config = {"times": ConfigKey((int,), required=True, label="Times", kind="integer", default=2, min=1)}

    async def run(self, node: Node, value: Any, ctx: RunContext) -> Any:
        return as_text(value).upper() * node.config["times"]


@pytest.fixture
def shout():
    register_node_type(ShoutNode())
    yield ShoutNode.name
    unregister_node_type(ShoutNode.name)


def test_a_registered_node_type_is_in_meta_with_its_form(owner_client, shout):
    listed = {kind["name"]: kind for kind in owner_client.get("/api/meta").json()["node_types"]}
    assert listed[shout] == {"name": "shout", "label": "Shout", "help": "", "pauses": False, "fields": [
        {"name": "times", "label": "Times", "kind": "integer", "required": True, "help": "", "default": 2, "min": 1}]}


def test_a_registered_node_type_is_saved_checked_and_run(owner_client, shout):
    wired = graph(node("start", "input"), node("loud", shout, times=3), node("out", "output"),
                  edges=[("start", "loud"), ("loud", "out")])
    refused = owner_client.post("/api/workflows", {"name": "bad", **graph(
        node("start", "input"), node("loud", shout, times="3"), edges=[("start", "loud")])}, format="json")
    assert refused.status_code == 400 and "config.times must be an integer" in str(refused.json())
    created = owner_client.post("/api/workflows", {"name": "loud", **wired}, format="json")
    assert created.status_code == 201, created.json()
    run = owner_client.post(f"/api/workflows/{created.json()['id']}/run", {"input": "hey"}, format="json").json()
    assert (run["status"], run["output"]) == ("success", "HEYHEYHEY")


def test_without_the_registration_the_type_is_refused_naming_the_node(owner_client):
    response = owner_client.post("/api/workflows", {"name": "loud", **graph(
        node("start", "input"), node("loud", "shout", times=3), edges=[("start", "loud")])}, format="json")
    assert response.status_code == 400
    assert "unknown type" in str(response.json()["error"]["details"]["node:loud"])
    assert "shout" not in {kind["name"] for kind in owner_client.get("/api/meta").json()["node_types"]}

"""The per-process cache of runnable graphs: every way a graph changes reaches the next run."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.workflows.conftest import graph, node
from workflows import selectors
from workflows.models import WorkflowNode

pytestmark = pytest.mark.django_db

CODE = graph(node("in", "input"), node("calc", "code", code="return Number(input) + 1;"),
             node("out", "output"), edges=[("in", "calc"), ("calc", "out")])


def create(client) -> str:
    response = client.post("/api/workflows", {"name": "calc", **CODE}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def run(client, workflow_id: str) -> str:
    response = client.post(f"/api/workflows/{workflow_id}/run", {"input": "41"}, format="json")
    assert response.status_code == 200, response.content
    return response.json()["output"]


def code_of(owner, workflow_id: str) -> str:
    runnable = selectors.workflow_runnable(owner_id=owner.pk, workflow_id=workflow_id)
    return next(item.config["code"] for item in runnable.graph.nodes if item.id == "calc")


def test_a_cached_graph_is_served_while_nothing_changes(owner, owner_client):
    workflow_id = create(owner_client)
    first = selectors.workflow_runnable(owner_id=owner.pk, workflow_id=workflow_id)
    assert selectors.workflow_runnable(owner_id=owner.pk, workflow_id=workflow_id) is first
    assert selectors.workflow_runnable(owner_id=owner.pk, name="calc") is first


def test_an_update_through_the_api_reaches_the_next_run(owner_client):
    workflow_id = create(owner_client)
    assert "42" in str(run(owner_client, workflow_id))
    changed = graph(node("in", "input"), node("calc", "code", code="return Number(input) * 2;"),
                    node("out", "output"), edges=[("in", "calc"), ("calc", "out")])
    assert owner_client.patch(f"/api/workflows/{workflow_id}", changed, format="json").status_code == 200
    assert "82" in str(run(owner_client, workflow_id))


def test_a_node_added_through_the_api_is_in_the_next_graph(owner, owner_client):
    workflow_id = create(owner_client)
    before = selectors.workflow_runnable(owner_id=owner.pk, workflow_id=workflow_id)
    added = {"id": "note", "type": "delay", "name": "note", "config": {"delayMs": 0}}
    response = owner_client.post(f"/api/workflows/{workflow_id}/nodes", added, format="json")
    assert response.status_code == 201, response.content
    after = selectors.workflow_runnable(owner_id=owner.pk, workflow_id=workflow_id)
    assert len(after.graph.nodes) == len(before.graph.nodes) + 1


def test_a_node_edited_in_the_django_admin_reaches_the_next_run(owner, owner_client, admin):
    workflow_id = create(owner_client)
    assert "Number(input) + 1" in code_of(owner, workflow_id)
    stored = WorkflowNode.objects.get(workflow_id=workflow_id, node_id="calc")
    browser = Client()
    browser.force_login(admin)
    response = browser.post(f"/admin/workflows/workflownode/{stored.pk}/change/", {
        "workflow": workflow_id, "node_id": "calc", "type": "code", "name": "calc", "order": stored.order,
        "config": '{"code": "return Number(input) - 1;"}', "position_x": 0, "position_y": 0})
    assert response.status_code == 302, response.content[:2000]
    assert "Number(input) - 1" in code_of(owner, workflow_id)
    assert "40" in str(run(owner_client, workflow_id))


def test_a_node_deleted_in_the_django_admin_is_gone_from_the_next_graph(owner, owner_client, admin):
    workflow_id = create(owner_client)
    selectors.workflow_runnable(owner_id=owner.pk, workflow_id=workflow_id)
    stored = WorkflowNode.objects.get(workflow_id=workflow_id, node_id="out")
    browser = Client()
    browser.force_login(admin)
    response = browser.post(f"/admin/workflows/workflownode/{stored.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    ids = [item.id for item in selectors.workflow_runnable(owner_id=owner.pk, workflow_id=workflow_id).graph.nodes]
    assert ids == ["in", "calc"]


def test_another_users_workflow_is_not_runnable(owner_client, other_user):
    workflow_id = create(owner_client)
    assert selectors.workflow_runnable(owner_id=other_user.pk, workflow_id=workflow_id) is None

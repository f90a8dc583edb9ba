"""Approval nodes over the API client: a run stops `waiting`, its approvers decide it (approve, reject, a
timeout decided by the task queue's schedule), a second decision and a stranger are refused, an approval in a
branch that is then joined, and a condition branching on the decision. The task queue runs inline here
(AGENTSITE_Q_SYNC): a decision queues the run again and the queue resumes it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.workflows.conftest import graph, node
from workflows.models import WorkflowApproval, WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True)

# input -> approval -> condition on the decision -> "yes" (code naming who) or "no" (output)
GATED = graph(node("in", "input"),
              node("ask", "approval", prompt="Publish ${in}?", timeout_s=3600),
              {"id": "gate", "name": "gate", "type": "condition",
               "config": {"condition": "input.decision === 'approve'", "trueBranch": "yes", "falseBranch": "no"}},
              node("yes", "code", code="return 'published by ' + input.by + ' with ' + JSON.stringify(input.data);"),
              node("no", "output"),
              node("out", "output"),
              edges=[("in", "ask"), ("ask", "gate"), ("gate", "yes"), ("gate", "no"), ("yes", "out")])


def start(client, data=GATED, name="gated", text="the post"):
    workflow = client.post("/api/workflows", {"name": name, **data}, format="json")
    assert workflow.status_code == 201, workflow.json()
    response = client.post(f"/api/workflows/{workflow.json()['id']}/run", {"input": text}, format="json")
    assert response.status_code == 200, response.json()
    return response.json()


def pending(client):
    listed = client.get("/api/approvals").json()
    return listed["results"]


def test_a_run_waits_then_an_approval_resumes_it_to_the_approved_branch(owner_client):
    run = start(owner_client)
    assert run["status"] == "waiting" and run["output"] is None and run["finished_at"] is None
    assert [(entry["node"], entry["status"]) for entry in run["trace"]] == [("in", "success"), ("ask", "waiting")]
    [approval] = pending(owner_client)
    assert (approval["run_id"], approval["node"], approval["prompt"], approval["approvers"], approval["status"]) == (
        run["id"], "ask", "Publish the post?", ["owner"], "pending")
    assert approval["expires_at"] and approval["workflow_name"] == "gated"
    stored = WorkflowRun.objects.get(pk=run["id"])
    assert stored.process == "" and stored.state["done"]["in"] == {"output": "the post", "targets": None}

    decided = owner_client.post(f"/api/approvals/{approval['id']}",
                                {"decision": "approve", "comment": "fine", "data": {"n": 1}}, format="json")
    assert decided.status_code == 200, decided.json()
    assert (decided.json()["status"], decided.json()["decision"], decided.json()["by"]) == ("approved", "approve",
                                                                                            "owner")
    finished = owner_client.get(f"/api/workflows/runs/{run['id']}").json()
    assert finished["status"] == "success", finished
    assert finished["outputs"]["ask"] == {"decision": "approve", "comment": "fine", "data": {"n": 1}, "by": "owner"}
    assert finished["output"] == 'published by owner with {"n":1}'
    assert [(entry["node"], entry["status"]) for entry in finished["trace"]] == [
        ("in", "success"), ("ask", "success"), ("gate", "success"), ("yes", "success"), ("out", "success")]
    assert finished["started_at"] == run["started_at"] and finished["finished_at"]
    assert pending(owner_client) == []
    assert WorkflowRun.objects.get(pk=run["id"]).state == {}


def test_a_rejection_takes_the_other_branch(owner_client):
    run = start(owner_client)
    [approval] = pending(owner_client)
    assert owner_client.post(f"/api/approvals/{approval['id']}", {"decision": "reject"},
                             format="json").status_code == 200
    finished = owner_client.get(f"/api/workflows/runs/{run['id']}").json()
    assert (finished["status"], finished["output"]) == ("success", '{"decision": "reject", "comment": "", '
                                                                   '"data": null, "by": "owner"}')
    assert "yes" not in finished["outputs"]


def test_a_second_decision_is_409_and_changes_nothing(owner_client):
    run = start(owner_client)
    [approval] = pending(owner_client)
    assert owner_client.post(f"/api/approvals/{approval['id']}", {"decision": "approve"},
                             format="json").status_code == 200
    again = owner_client.post(f"/api/approvals/{approval['id']}", {"decision": "reject"}, format="json")
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"
    assert owner_client.get(f"/api/workflows/runs/{run['id']}").json()["outputs"]["ask"]["decision"] == "approve"


def test_someone_not_named_gets_404_and_sees_nothing(owner_client, other_client):
    start(owner_client)
    [approval] = pending(owner_client)
    assert pending(other_client) == []
    refused = other_client.post(f"/api/approvals/{approval['id']}", {"decision": "approve"}, format="json")
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found"
    assert WorkflowApproval.objects.get(pk=approval["id"]).status == "pending"


def test_named_approvers_decide_and_the_owner_then_does_not(owner_client, other_client, other_user):
    data = graph(node("in", "input"), node("ask", "approval", prompt="ok?", approvers=["other"]),
                 node("out", "output"), edges=[("in", "ask"), ("ask", "out")])
    run = start(owner_client, data, name="named")
    assert pending(owner_client) == []
    [approval] = pending(other_client)
    assert approval["approvers"] == ["other"]
    assert owner_client.post(f"/api/approvals/{approval['id']}", {"decision": "approve"},
                             format="json").status_code == 404
    assert other_client.post(f"/api/approvals/{approval['id']}", {"decision": "approve", "comment": "yes"},
                             format="json").status_code == 200
    finished = owner_client.get(f"/api/workflows/runs/{run['id']}").json()
    assert finished["status"] == "success" and finished["outputs"]["ask"]["by"] == "other"


@pytest.mark.parametrize("body", [{}, {"decision": "maybe"}, {"decision": "approve", "comment": 5},
                                  {"decision": "approve", "data": {"a": "\x00"}}])
def test_a_bad_decision_is_400(owner_client, body):
    start(owner_client)
    [approval] = pending(owner_client)
    response = owner_client.post(f"/api/approvals/{approval['id']}", body, format="json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid", response.json()


@pytest.mark.parametrize(("on_timeout", "branch"), [("reject", "no"), ("approve", "yes")])
def test_a_timeout_is_decided_by_the_task_queue_schedule(owner_client, on_timeout, branch):
    from django_q.brokers import get_broker
    from django_q.models import Schedule
    from django_q.scheduler import scheduler

    data = {**GATED, "nodes": [dict(item, config={**item["config"], "on_timeout": on_timeout})
                               if item["name"] == "ask" else item for item in GATED["nodes"]]}
    run = start(owner_client, data)
    [approval] = pending(owner_client)
    [schedule] = Schedule.objects.filter(name=f"workflow-approval:{approval['id']}")
    scheduler(broker=get_broker())  # not due yet: nothing decided
    assert WorkflowApproval.objects.get(pk=approval["id"]).status == "pending"
    past = timezone.now() - timedelta(seconds=1)
    WorkflowApproval.objects.filter(pk=approval["id"]).update(expires_at=past)
    Schedule.objects.filter(pk=schedule.pk).update(next_run=past)
    scheduler(broker=get_broker())  # the cluster's scheduler: runs the due schedule (inline here)
    finished = owner_client.get(f"/api/workflows/runs/{run['id']}").json()
    assert finished["status"] == "success" and branch in finished["outputs"], finished
    assert finished["outputs"]["ask"]["decision"] == on_timeout and finished["outputs"]["ask"]["by"] is None
    late = owner_client.post(f"/api/approvals/{approval['id']}", {"decision": "approve"}, format="json")
    assert late.status_code == 409


def test_a_decision_removes_the_timeout_schedule(owner_client):
    from django_q.models import Schedule

    start(owner_client)
    [approval] = pending(owner_client)
    owner_client.post(f"/api/approvals/{approval['id']}", {"decision": "approve"}, format="json")
    assert not Schedule.objects.filter(name=f"workflow-approval:{approval['id']}").exists()


def test_approvals_in_branches_that_are_then_joined(owner_client):
    """Two branches, each with an approval, joined: the run waits for both, runs on after the last."""
    data = graph(node("in", "input"),
                 node("left", "code", code="return 'L:' + input;"), node("right", "code", code="return 'R:' + input;"),
                 node("okL", "approval", prompt="left ${left}"), node("okR", "approval", prompt="right ${right}"),
                 node("join", "code", code="return [input.okL.decision, input.okR.decision, input.okR.by];"),
                 node("out", "output", outputFormat="json"),
                 edges=[("in", "left"), ("in", "right"), ("left", "okL"), ("right", "okR"), ("okL", "join"),
                        ("okR", "join"), ("join", "out")])
    run = start(owner_client, data, name="joined", text="x")
    assert run["status"] == "waiting"
    by_node = {item["node"]: item for item in pending(owner_client)}
    assert {name: item["prompt"] for name, item in by_node.items()} == {"okL": "left L:x", "okR": "right R:x"}
    owner_client.post(f"/api/approvals/{by_node['okL']['id']}", {"decision": "approve"}, format="json")
    assert owner_client.get(f"/api/workflows/runs/{run['id']}").json()["status"] == "waiting"
    owner_client.post(f"/api/approvals/{by_node['okR']['id']}", {"decision": "reject"}, format="json")
    finished = owner_client.get(f"/api/workflows/runs/{run['id']}").json()
    assert (finished["status"], finished["output"]) == ("success", ["approve", "reject", "owner"]), finished
    ran = [entry["node"] for entry in finished["trace"]]
    assert sorted(ran) == sorted(["in", "left", "right", "okL", "okR", "join", "out"]) and len(ran) == 7


def test_a_waiting_run_resumes_on_the_graph_it_started_with_after_an_edit(owner_client):
    run = start(owner_client)
    workflow_id = run["workflow_id"]
    edited = {**GATED, "nodes": [dict(item, config={"code": "return 'edited';"}) if item["name"] == "yes" else item
                                 for item in GATED["nodes"]]}
    assert owner_client.patch(f"/api/workflows/{workflow_id}", edited, format="json").status_code == 200
    [approval] = pending(owner_client)
    owner_client.post(f"/api/approvals/{approval['id']}", {"decision": "approve"}, format="json")
    finished = owner_client.get(f"/api/workflows/runs/{run['id']}").json()
    assert finished["output"] == "published by owner with null"
    # The run records the version it started on (issue 31 item 3), and resumed on it.
    assert finished["version"] == run["version"] == 1
    assert owner_client.get(f"/api/workflows/{workflow_id}").json()["version"] == 2


@pytest.mark.parametrize(("config", "words"), [
    ({"approvers": "owner"}, "approvers must be a list"), ({"approvers": [5]}, "approvers must be a list"),
    ({"timeout_s": 0}, "timeout_s must be from 1"), ({"on_timeout": "maybe"}, "on_timeout must be"),
    ({"retry": {"max": 1}}, "no retry"), ({"prompt": "${nowhere}"}, "names no node")])
def test_an_approval_node_is_checked_on_save(owner_client, config, words):
    data = graph(node("in", "input"), node("ask", "approval", **config), edges=[("in", "ask")])
    response = owner_client.post("/api/workflows", {"name": "bad", **data}, format="json")
    assert response.status_code == 400 and words in str(response.json()["error"]["details"]), response.json()


async def test_a_streamed_run_sends_approval_requested_and_ends(owner):
    from asgiref.sync import sync_to_async

    from tests.workflows.test_run_outcomes import events_of, stream_run
    from workflows.services import workflow_create

    workflow = await sync_to_async(workflow_create)(owner=owner, name="gated", **GATED)
    response = await stream_run(owner, workflow.pk, "p")
    events = events_of(response.text)
    assert [name for name, _ in events] == ["run_started", "node_started", "node_finished", "node_started",
                                            "approval_requested"], events
    data = events[-1][1]
    assert data["run"]["status"] == "waiting" and data["run"]["id"] == events[0][1]["run_id"]
    [approval] = data["approvals"]
    assert (approval["node"], approval["prompt"], approval["status"]) == ("ask", "Publish p?", "pending")


def _at_once(*calls):
    """Each call on a thread of its own, released together; their answers in order."""
    import threading

    from django.db import connection

    barrier = threading.Barrier(len(calls))
    answers: list = [None] * len(calls)

    def call(index: int) -> None:
        try:
            barrier.wait(timeout=10)
            answers[index] = calls[index]()
        finally:
            connection.close()

    threads = [threading.Thread(target=call, args=(index,)) for index in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive(), "a decision did not come back within 60 s"
    return answers


def test_two_approvers_deciding_one_approval_at_once_one_wins_and_the_run_resumes_once(owner_client, other_client,
                                                                                      other_user):
    data = graph(node("in", "input"), node("ask", "approval", prompt="ok?", approvers=["owner", "other"]),
                 node("say", "code", code="return input.decision + ' by ' + input.by;"), node("out", "output"),
                 edges=[("in", "ask"), ("ask", "say"), ("say", "out")])
    run = start(owner_client, data, name="two")
    [approval] = pending(owner_client)
    path = f"/api/approvals/{approval['id']}"
    answers = _at_once(lambda: owner_client.post(path, {"decision": "approve"}, format="json"),
                       lambda: other_client.post(path, {"decision": "reject"}, format="json"))
    assert sorted(answer.status_code for answer in answers) == [200, 409], [a.content for a in answers]
    winner = next(answer.json() for answer in answers if answer.status_code == 200)
    loser = next(answer for answer in answers if answer.status_code == 409)
    assert loser.json()["error"]["code"] == "conflict"
    finished = owner_client.get(f"/api/workflows/runs/{run['id']}").json()
    assert finished["status"] == "success", finished
    assert finished["output"] == f"{winner['decision']} by {winner['by']}"  # the winner's decision, and only it
    assert [entry["node"] for entry in finished["trace"]].count("say") == 1
    stored = WorkflowApproval.objects.get(pk=approval["id"])
    assert (stored.decision, stored.decided_by.username) == (winner["decision"], winner["by"])


def test_the_last_two_approvals_of_a_run_decided_at_once_resume_it_exactly_once(owner_client, other_client,
                                                                               other_user):
    data = graph(node("in", "input"),
                 node("okL", "approval", prompt="left", approvers=["owner"]),
                 node("okR", "approval", prompt="right", approvers=["other"]),
                 node("join", "code", code="return [input.okL.decision, input.okR.decision];"),
                 node("out", "output", outputFormat="json"),
                 edges=[("in", "okL"), ("in", "okR"), ("okL", "join"), ("okR", "join"), ("join", "out")])
    run = start(owner_client, data, name="joined-at-once", text="x")
    [left], [right] = pending(owner_client), pending(other_client)
    answers = _at_once(
        lambda: owner_client.post(f"/api/approvals/{left['id']}", {"decision": "approve"}, format="json"),
        lambda: other_client.post(f"/api/approvals/{right['id']}", {"decision": "reject"}, format="json"))
    assert [answer.status_code for answer in answers] == [200, 200], [a.content for a in answers]
    finished = owner_client.get(f"/api/workflows/runs/{run['id']}").json()
    assert (finished["status"], finished["output"]) == ("success", ["approve", "reject"]), finished
    assert [entry["node"] for entry in finished["trace"]].count("join") == 1

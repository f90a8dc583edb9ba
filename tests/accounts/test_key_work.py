"""What an API key creates runs as that key: a webhook trigger whose secret a key was handed, and a scheduled task
a key wrote, run with the key's Caller (its budget binds them) and stop when the key no longer stands (refused,
or recorded `error`, and nothing runs); a dashboard token's rotation or edit hands them back to the owner."""

from __future__ import annotations

import uuid

import pytest
from rest_framework.test import APIClient

from accounts.models import ApiKey, AuditEvent
from agentsite.agent.usage import current_caller
from scheduler.models import ScheduledTask, TaskRun
from tests.conftest import client_for
from tests.workflows.conftest import graph, node
from workflows.models import WorkflowRun, WorkflowTrigger
from workflows.tasks import workflow_run_task

DOUBLE = graph(node("in", "input"), node("calc", "code", code="return JSON.parse(input).n * 2;"),
               node("out", "output"), edges=[("in", "calc"), ("calc", "out")])
SEEN: list[tuple[str, str]] = []


async def caller_runner(*, task, scheduled_for) -> str:
    """A scheduler runner that reports whom the run acts as."""
    caller = current_caller()
    SEEN.append((str(task.pk), caller.key_id if caller else "no caller"))
    return f"key={caller.key_id if caller else ''}"


def _key(user, **fields) -> tuple[str, int, APIClient]:
    answer = client_for(user).post("/api/keys", {"name": "script", "scopes": ["api"], **fields}, format="json")
    assert answer.status_code == 201, answer.content
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {answer.json()['key']}")
    return answer.json()["key"], answer.json()["id"], client


def _workflow(client) -> str:
    answer = client.post("/api/workflows", {"name": f"double-{uuid.uuid4().hex[:6]}", **DOUBLE}, format="json")
    assert answer.status_code == 201, answer.content
    return answer.json()["id"]


def _trigger(client, workflow_id: str, **body) -> dict:
    answer = client.post(f"/api/workflows/{workflow_id}/triggers", body, format="json")
    assert answer.status_code == 201, answer.content
    return answer.json()


def _send(trigger: dict):
    return APIClient().generic("POST", f"/hooks/{trigger['id']}", b'{"n": 21}', content_type="application/json",
                               HTTP_AUTHORIZATION=f"Bearer {trigger['secret']}")


# --- webhook triggers ------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_a_trigger_made_with_a_key_runs_as_that_key(owner):
    _, key_id, client = _key(owner)
    trigger = _trigger(client, _workflow(client))
    assert WorkflowTrigger.objects.get(pk=trigger["id"]).created_by_key_id == key_id
    answer = _send(trigger)
    assert answer.status_code == 200 and answer.json()["output"] == "42", answer.content
    assert WorkflowRun.objects.get(pk=answer.json()["id"]).acting_key == str(key_id)
    # A dashboard token's trigger acts as the owner, as before.
    mine = _trigger(client_for(owner), _workflow(client_for(owner)))
    assert WorkflowTrigger.objects.get(pk=mine["id"]).created_by_key_id is None
    assert WorkflowRun.objects.get(pk=_send(mine).json()["id"]).acting_key == ""


@pytest.mark.django_db
def test_a_queued_run_of_a_keys_trigger_keeps_the_key(owner):
    _, key_id, client = _key(owner)
    trigger = _trigger(client, _workflow(client), mode="async")
    answer = _send(trigger)
    assert answer.status_code == 202, answer.content
    assert WorkflowRun.objects.get(pk=answer.json()["id"]).acting_key == str(key_id)
    assert workflow_run_task(answer.json()["id"]) == "success"


@pytest.mark.django_db
def test_a_queued_run_of_a_key_revoked_before_it_ran_is_stored_error_and_runs_nothing(owner):
    _, key_id, client = _key(owner)
    trigger = _trigger(client, _workflow(client), mode="async")
    answer = _send(trigger)
    assert answer.status_code == 202, answer.content
    assert client_for(owner).delete(f"/api/keys/{key_id}").status_code == 204
    assert workflow_run_task(answer.json()["id"]) == "error"
    run = WorkflowRun.objects.get(pk=answer.json()["id"])
    assert "revoked" in run.error["message"] and run.trace == [], (run.error, run.trace)


@pytest.mark.django_db
def test_a_keys_spent_budget_refuses_its_triggers_runs(owner):
    from usage import budgets

    _, key_id, client = _key(owner, budget={"tokens_per_day": 10})
    trigger = _trigger(client, _workflow(client))
    scopes = [budgets.Scope(f"k:{key_id}", {"tokens_per_day": 10})]
    budgets.reserve(scopes)  # an LLM call of 11 tokens made with the key, as the metering records one
    budgets.settle(scopes, 11, 0.0)
    answer = _send(trigger)
    assert answer.status_code == 429 and answer.json()["error"]["code"] == "budget_exceeded", answer.content
    assert WorkflowRun.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize("revoked", ["the key", "its parent"])
def test_a_revoked_keys_trigger_is_refused_and_recorded(owner, revoked):
    parent_secret, parent_id, parent = _key(owner)
    made = parent.post("/api/keys", {"name": "child", "scopes": ["api"]}, format="json").json()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {made['key']}")
    workflow_id = _workflow(client)
    trigger = _trigger(client, workflow_id)
    assert _send(trigger).status_code == 200
    target = made["id"] if revoked == "the key" else parent_id
    assert client_for(owner).delete(f"/api/keys/{target}").status_code == 204
    answer = _send(trigger)
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "trigger_disabled", answer.content
    assert "revoked" in answer.json()["error"]["message"]
    assert WorkflowRun.objects.count() == 1
    event = AuditEvent.objects.get(action="webhook.refused", target=f"trigger:{trigger['id']}")
    assert event.details == {"status": 403, "code": "trigger_disabled"}
    # The owner takes it back: a rotation with a dashboard token hands the new secret, and the runs, to them.
    rotated = client_for(owner).post(f"/api/workflows/{workflow_id}/triggers/{trigger['id']}/rotate").json()
    assert WorkflowTrigger.objects.get(pk=trigger["id"]).created_by_key_id is None
    assert _send({**trigger, "secret": rotated["secret"]}).status_code == 200


@pytest.mark.django_db
def test_rotating_a_trigger_with_a_key_hands_its_runs_to_the_key(owner):
    trigger = _trigger(client_for(owner), workflow_id := _workflow(client_for(owner)))
    _, key_id, client = _key(owner)
    rotated = client.post(f"/api/workflows/{workflow_id}/triggers/{trigger['id']}/rotate").json()
    assert WorkflowTrigger.objects.get(pk=trigger["id"]).created_by_key_id == key_id
    ApiKey.objects.get(pk=key_id).delete()  # a key deleted (Django admin) takes what it made with it
    assert not WorkflowTrigger.objects.filter(pk=trigger["id"]).exists()
    assert _send({**trigger, "secret": rotated["secret"]}).status_code == 404


# --- scheduled tasks ---------------------------------------------------------------------------------------

TASK = {"name": "digest", "cron": "0 9 * * 1-5", "prompt": "Summarise the news."}


@pytest.fixture
def reporting(settings):
    settings.AGENTSITE_SCHEDULER_RUNNER = "tests.accounts.test_key_work.caller_runner"
    SEEN.clear()


@pytest.mark.django_db(transaction=True)
def test_a_task_written_with_a_key_runs_as_that_key_and_stops_when_it_is_revoked(owner, reporting):
    _, key_id, client = _key(owner)
    task = client.post("/api/scheduler/tasks", TASK, format="json").json()
    assert ScheduledTask.objects.get(pk=task["id"]).created_by_key_id == key_id
    assert client.post(f"/api/scheduler/run/{task['id']}").status_code == 202
    assert SEEN == [(task["id"], str(key_id))]
    assert client_for(owner).delete(f"/api/keys/{key_id}").status_code == 204
    assert client_for(owner).post(f"/api/scheduler/run/{task['id']}").status_code == 202
    assert len(SEEN) == 1, "the runner ran for a revoked key's task"
    latest = TaskRun.objects.filter(task_id=task["id"]).order_by("-created_at").first()
    assert latest.status == TaskRun.ERROR and "revoked" in latest.error
    # Its owner edits it with a dashboard token: it is theirs again, and runs as them.
    assert client_for(owner).patch(f"/api/scheduler/tasks/{task['id']}", {"enabled": True},
                                   format="json").status_code == 200
    assert ScheduledTask.objects.get(pk=task["id"]).created_by_key_id is None
    client_for(owner).post(f"/api/scheduler/run/{task['id']}")
    assert SEEN[-1] == (task["id"], "")


@pytest.mark.django_db(transaction=True)
def test_a_dashboard_task_edited_with_a_key_becomes_the_keys(owner, reporting):
    task = client_for(owner).post("/api/scheduler/tasks", TASK, format="json").json()
    assert ScheduledTask.objects.get(pk=task["id"]).created_by_key_id is None
    _, key_id, client = _key(owner)
    assert client.patch(f"/api/scheduler/tasks/{task['id']}", {"prompt": "other"}, format="json").status_code == 200
    assert ScheduledTask.objects.get(pk=task["id"]).created_by_key_id == key_id
    client.post(f"/api/scheduler/run/{task['id']}")
    assert SEEN == [(task["id"], str(key_id))]


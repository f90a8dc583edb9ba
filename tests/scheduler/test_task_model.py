"""A scheduled task's `model` (issue 26, item 4): checked against the model catalogue when saved (unknown: 400
naming it; not with a workflow, whose llm nodes name their own), and used for the task's run."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduler import services
from scheduler.models import ScheduledTask
from sessions_app.models import ChatMessage
from sessions_app.services import session_create
from tests.catalogue import closed_url, two_upstreams, use_catalogue
from tests.fakes.llm import Text

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
TASK = {"name": "t", "cron": "0 * * * *", "prompt": "status report"}


@pytest.fixture
def catalogue(fake_openai):
    with use_catalogue(two_upstreams(closed_url(), fake_openai.base_url)) as settings:
        yield settings


def fire(task_id, when: datetime = T0) -> str:
    ScheduledTask.objects.filter(pk=task_id).update(next_run_at=when)
    [run] = services.tick(now=when)
    run.refresh_from_db()
    assert run.status == "success", run.error
    return run.output


def test_the_model_is_saved_and_checked(owner_client, catalogue):
    created = owner_client.post("/api/scheduler/tasks", {**TASK, "model": "smart"}, format="json")
    assert created.status_code == 201 and created.json()["model"] == "smart"
    task_id = created.json()["id"]
    refused = owner_client.patch(f"/api/scheduler/tasks/{task_id}", {"model": "nope"}, format="json")
    assert refused.status_code == 400 and refused.json()["error"]["details"].keys() == {"model"}
    assert "'nope'" in refused.json()["error"]["message"]
    assert ScheduledTask.objects.get(pk=task_id).model == "smart"
    assert owner_client.post("/api/scheduler/tasks", {**TASK, "model": "x/y"}, format="json").status_code == 400
    assert owner_client.post("/api/scheduler/tasks", TASK, format="json").json()["model"] == ""


def test_a_workflow_task_takes_no_model(owner_client, owner, catalogue):
    from workflows.services import workflow_create

    workflow = workflow_create(owner=owner, name="wf")
    refused = owner_client.post("/api/scheduler/tasks", {**TASK, "workflow_id": str(workflow.pk), "model": "smart"},
                                format="json")
    assert refused.status_code == 400 and "model" in refused.json()["error"]["details"]
    task = owner_client.post("/api/scheduler/tasks", {**TASK, "model": "smart"}, format="json").json()
    moved = owner_client.patch(f"/api/scheduler/tasks/{task['id']}", {"workflow_id": str(workflow.pk)}, format="json")
    assert moved.status_code == 400 and "model" in moved.json()["error"]["details"]


def test_a_prompt_run_uses_the_tasks_model_through_the_router(owner, catalogue, fake_openai):
    fake_openai.script(Text("from local"))
    task = services.task_create(owner=owner, timezone_name="UTC", model="smart", **TASK)
    assert fire(task.pk) == "from local"
    assert [body["model"] for body in fake_openai.bodies()] == ["small"]  # hosted refused; the alias fell back


def test_a_session_run_uses_the_tasks_model_else_the_sessions(owner, fake_openai):
    with use_catalogue(two_upstreams(fake_openai.base_url, fake_openai.base_url)):
        session = session_create(owner=owner, name="daily", model="hosted/big")
        fake_openai.script(Text("one"), Text("two"))
        task = services.task_create(owner=owner, timezone_name="UTC", session_id=session.pk, model="local/small",
                                    **TASK)
        fire(task.pk)
        ScheduledTask.objects.filter(pk=task.pk).update(model="")
        fire(task.pk, T0.replace(hour=13))
    assert [body["model"] for body in fake_openai.bodies()] == ["small", "big"]
    assert ChatMessage.objects.filter(session=session, role="assistant").count() == 2

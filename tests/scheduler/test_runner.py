"""The default runner: the agent as the task's owner, a workflow, or a turn appended to a session."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agentsite.core.errors import AppError
from scheduler import services
from scheduler.models import ScheduledTask, TaskRun
from sessions_app.models import ChatMessage
from sessions_app.services import session_create
from tests.fakes.llm import Text

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def fire(task: ScheduledTask) -> TaskRun:
    ScheduledTask.objects.filter(pk=task.pk).update(next_run_at=T0)
    [run] = services.tick(now=T0)
    run.refresh_from_db()
    return run


def test_a_prompt_goes_to_the_agent_as_the_owner(owner):
    run = fire(services.task_create(owner=owner, name="ping", cron="0 * * * *", prompt="ping from the schedule"))
    assert run.status == "success" and "ping from the schedule" in run.output


def test_the_owners_config_is_used(owner, fake_openai):
    from catalogue.services import config_update

    config_update(changes={"provider": "openai", "base_url": fake_openai.base_url, "model": "m", "kb_enabled": False})
    fake_openai.script(Text("Scheduled answer."))
    run = fire(services.task_create(owner=owner, name="ask", cron="0 * * * *", prompt="question"))
    assert (run.status, run.output) == ("success", "Scheduled answer.")
    assert fake_openai.requests[-1].json()["messages"][-1]["content"] == "question"


def test_with_a_session_the_prompt_and_reply_are_appended_as_a_turn(owner):
    session = session_create(owner=owner, name="daily")
    run = fire(services.task_create(owner=owner, name="s", cron="0 * * * *", prompt="good morning",
                                    session_id=session.pk))
    messages = list(ChatMessage.objects.filter(session=session).order_by("seq"))
    assert [(message.role, message.status) for message in messages] == [("user", "complete"),
                                                                        ("assistant", "complete")]
    assert messages[0].content == "good morning" and messages[1].content == run.output


def test_with_a_workflow_the_prompt_is_its_input(owner):
    from workflows.services import workflow_create

    workflow = workflow_create(owner=owner, name="wrap", nodes=[
        {"id": "in", "type": "input", "name": "in"},
        {"id": "code", "type": "code", "name": "code", "config": {"code": "return '[' + input + ']';"}},
        {"id": "out", "type": "output", "name": "out"}], edges=[{"from": "in", "to": "code"},
                                                                  {"from": "code", "to": "out"}])
    run = fire(services.task_create(owner=owner, name="w", cron="0 * * * *", prompt="payload",
                                    workflow_id=workflow.pk))
    assert (run.status, run.output) == ("success", "[payload]")
    assert workflow.runs.count() == 1


def test_a_failing_workflow_makes_the_run_an_error_naming_the_node(owner):
    from workflows.services import workflow_create

    workflow = workflow_create(owner=owner, name="bad", nodes=[
        {"id": "in", "type": "input", "name": "in"},
        {"id": "boom", "type": "code", "name": "boom", "config": {"code": "throw new Error('broken step');"}}],
        edges=[{"from": "in", "to": "boom"}])
    run = fire(services.task_create(owner=owner, name="w", cron="0 * * * *", prompt="x", workflow_id=workflow.pk))
    assert run.status == "error" and "boom" in run.error and "broken step" in run.error


def test_a_workflow_past_the_runs_time_limit_is_stored_error_saying_so_not_as_a_hang_up(owner, settings):
    from workflows.services import workflow_create

    settings.AGENTSITE_SCHEDULER_RUN_TIMEOUT_S = 1.0
    workflow = workflow_create(owner=owner, name="slow", nodes=[
        {"id": "in", "type": "input", "name": "in"},
        {"id": "wait", "type": "delay", "name": "wait", "config": {"delayMs": 60_000}},
        {"id": "out", "type": "output", "name": "out"}], edges=[{"from": "in", "to": "wait"},
                                                                  {"from": "wait", "to": "out"}])
    run = fire(services.task_create(owner=owner, name="w", cron="0 * * * *", prompt="x", workflow_id=workflow.pk))
    assert run.status == "error"
    [workflow_run] = workflow.runs.all()
    assert workflow_run.status == "error", (workflow_run.status, workflow_run.error)
    assert "hung up" not in str(workflow_run.error) and "hung up" not in run.error


def test_a_workflow_task_may_pin_a_version(owner):
    from workflows.services import workflow_create, workflow_update

    def wrap(left: str) -> dict:
        return {"nodes": [{"id": "in", "type": "input", "name": "in"},
                          {"id": "code", "type": "code", "name": "code",
                           "config": {"code": f"return '{left}' + input;"}},
                          {"id": "out", "type": "output", "name": "out"}],
                "edges": [{"from": "in", "to": "code"}, {"from": "code", "to": "out"}]}

    workflow = workflow_create(owner=owner, name="pin", **wrap("v1:"))
    workflow_update(workflow=workflow, changes=wrap("v2:"))
    pinned = services.task_create(owner=owner, name="p", cron="0 * * * *", prompt="x", workflow_id=workflow.pk,
                                  workflow_version=1)
    assert fire(pinned).output == "v1:x"
    latest = services.task_create(owner=owner, name="l", cron="0 * * * *", prompt="x", workflow_id=workflow.pk)
    assert fire(latest).output == "v2:x"
    assert sorted(workflow.runs.values_list("version", flat=True)) == [1, 2]
    with pytest.raises(AppError) as refused:
        services.task_create(owner=owner, name="bad", cron="0 * * * *", prompt="x", workflow_id=workflow.pk,
                             workflow_version=3)
    assert "workflow_version" in refused.value.details

"""A process a peer took for dead (its heartbeat stalled past AGENTSITE_PROCESS_STALE_S while it was still
working) finishes its work after all: the sweep's mark on a streaming reply, a workflow run or a scheduled run
gives way to the owner's own result. A process that really died never writes again (a restart is another
process id), and a result stored once is never replaced."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from agentsite.core.processes import current_process_id
from scheduler import services as scheduler_services
from scheduler.models import ScheduledTask, TaskRun
from sessions_app import services as session_services
from sessions_app.models import ChatMessage, ChatSession
from workflows import selectors as workflow_selectors
from workflows import services as workflow_services
from workflows.models import WorkflowRun

pytestmark = pytest.mark.django_db

ELSEWHERE = "other-host/abc:4242:1"  # a process that died: its id never comes back


@pytest.fixture(autouse=True)
def _recorded_anew():
    """This process's record is made inside each test's transaction and rolled back with it: forget it after
    the test, so the next caller records it again instead of trusting a row that is gone."""
    from agentsite.core import processes

    yield
    processes._current = None


@pytest.fixture
def owner():
    return get_user_model().objects.create_user("sweepee", password="a-long-password-1")


def test_a_reply_swept_while_still_streaming_is_finished_by_its_process(owner):
    session = ChatSession.objects.create(owner=owner)
    reply = session_services.message_start_reply(session=session, message_id=uuid.uuid4())
    session_services.message_checkpoint_reply(message_id=reply.pk, content="Half")

    assert session_services.replies_mark_interrupted([current_process_id()]) == 1  # a peer's sweep
    assert ChatMessage.objects.get(pk=reply.pk).status == "interrupted"

    assert session_services.message_checkpoint_reply(message_id=reply.pk, content="Half a") is True
    assert ChatMessage.objects.get(pk=reply.pk).status == "streaming"
    session_services.replies_mark_interrupted([current_process_id()])  # and swept once more before the end
    stored = session_services.message_store_reply(session=session, message_id=reply.pk, content="Half a reply.",
                                                  status="complete", finish_reason="stop")
    assert (stored.status, stored.content, stored.finish_reason, stored.process) == (
        "complete", "Half a reply.", "stop", "")
    # Stored once: a later store of the same id (a retry) keeps it.
    again = session_services.message_store_reply(session=session, message_id=reply.pk, content="Other",
                                                 status="complete", finish_reason="stop")
    assert again.content == "Half a reply."


def test_a_reply_of_a_dead_process_or_hung_up_here_stays_as_it_was_stored(owner):
    session = ChatSession.objects.create(owner=owner)
    dead = session_services.message_append(session=session, role="assistant", content="Cut", status="streaming",
                                           process=ELSEWHERE)
    session_services.replies_mark_interrupted([ELSEWHERE])
    assert session_services.message_checkpoint_reply(message_id=dead.pk, content="Cut off") is False
    kept = session_services.message_store_reply(session=session, message_id=dead.pk, content="Cut off",
                                                status="complete", finish_reason="stop")
    assert (kept.status, kept.content) == ("interrupted", "Cut")

    hung_up = session_services.message_start_reply(session=session, message_id=uuid.uuid4())
    session_services.message_store_reply(session=session, message_id=hung_up.pk, content="Part",
                                         status="interrupted", finish_reason="interrupted")
    assert session_services.message_checkpoint_reply(message_id=hung_up.pk, content="Part more") is False
    assert ChatMessage.objects.get(pk=hung_up.pk).content == "Part"


def _workflow_run(owner) -> WorkflowRun:
    workflow = workflow_services.workflow_create(owner=owner, name=f"w{uuid.uuid4().hex[:6]}")
    runnable = workflow_selectors.workflow_runnable(owner_id=owner.pk, workflow_id=workflow.pk)
    return workflow_services.run_create(workflow=runnable, input_text="x")


def test_a_workflow_run_swept_while_running_is_finished_by_its_process(owner):
    run = _workflow_run(owner)
    assert run.process == current_process_id()
    assert workflow_services.runs_mark_crashed([current_process_id()]) == 1
    assert WorkflowRun.objects.get(pk=run.pk).status == WorkflowRun.ERROR

    workflow_services.run_finish(run=run, status=WorkflowRun.SUCCESS, outputs={"input": "x"}, output="x", error=None,
                                 trace=[])
    stored = WorkflowRun.objects.get(pk=run.pk)
    assert (stored.status, stored.output, stored.error) == (WorkflowRun.SUCCESS, "x", None)
    workflow_services.run_finish(run=run, status=WorkflowRun.ERROR, outputs={}, output=None,
                                 error={"node": None, "message": "late"}, trace=[])
    assert WorkflowRun.objects.get(pk=run.pk).status == WorkflowRun.SUCCESS  # stored once


def test_a_workflow_run_of_a_dead_process_stays_marked(owner):
    run = _workflow_run(owner)
    WorkflowRun.objects.filter(pk=run.pk).update(process=ELSEWHERE)
    workflow_services.runs_mark_crashed([ELSEWHERE])
    workflow_services.run_finish(run=run, status=WorkflowRun.SUCCESS, outputs={}, output="x", error=None, trace=[])
    stored = WorkflowRun.objects.get(pk=run.pk)
    assert stored.status == WorkflowRun.ERROR and stored.error["message"] == workflow_services.SWEPT_MESSAGE


def _task_run(owner, process: str) -> TaskRun:
    task = ScheduledTask.objects.create(owner=owner, name="t", cron="0 3 * * *", prompt="p")
    return TaskRun.objects.create(task=task, trigger="manual", scheduled_for=timezone.now(), status=TaskRun.RUNNING,
                                  process=process, started_at=timezone.now())


def test_a_scheduled_run_swept_while_running_is_finished_by_its_process(owner):
    run = _task_run(owner, current_process_id())
    assert scheduler_services.runs_mark_crashed([current_process_id()]) == 1
    scheduler_services.run_finish(run=run, status=TaskRun.SUCCESS, output="Done.")
    stored = TaskRun.objects.get(pk=run.pk)
    assert (stored.status, stored.output, stored.error) == (TaskRun.SUCCESS, "Done.", "")
    scheduler_services.run_finish(run=run, status=TaskRun.ERROR, error="late")
    assert TaskRun.objects.get(pk=run.pk).status == TaskRun.SUCCESS


def test_a_scheduled_run_of_a_dead_process_stays_marked(owner):
    run = _task_run(owner, ELSEWHERE)
    scheduler_services.runs_mark_crashed([ELSEWHERE])
    scheduler_services.run_finish(run=run, status=TaskRun.SUCCESS, output="Done.")
    assert TaskRun.objects.get(pk=run.pk).error == scheduler_services.SWEPT_ERROR

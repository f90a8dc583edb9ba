"""A task whose process died ends `failed`, with the event that says so; a live process's task and an ended task
are left as they are (a2a_app.sweep)."""

from __future__ import annotations

import pytest
from a2a.types.a2a_pb2 import StreamResponse, Task, TaskState, TaskStatus

from a2a_app.models import A2ATask, A2ATaskEvent
from a2a_app.sweep import REASON, tasks_mark_failed

DEAD, LIVE = "host/boot:101:5", "host/boot:202:7"


def _task(owner, task_id: str, state: int, process: str) -> A2ATask:
    task = Task(id=task_id, context_id="c1", status=TaskStatus(state=state))
    return A2ATask.objects.create(id=task_id, owner=f"user:{owner.pk}", user=owner, agent_slug="default",
                                  context_id="c1", state=TaskState.Name(state), version=3,
                                  task=task.SerializeToString(), process=process)


@pytest.mark.django_db
def test_a_dead_processs_running_tasks_fail_and_nothing_else_changes(owner):
    _task(owner, "working-dead", TaskState.TASK_STATE_WORKING, DEAD)
    _task(owner, "submitted-dead", TaskState.TASK_STATE_SUBMITTED, DEAD)
    _task(owner, "working-live", TaskState.TASK_STATE_WORKING, LIVE)
    _task(owner, "done", TaskState.TASK_STATE_COMPLETED, "")
    _task(owner, "unowned", TaskState.TASK_STATE_WORKING, "")

    assert tasks_mark_failed([DEAD]) == 2
    states = dict(A2ATask.objects.values_list("pk", "state"))
    assert states == {"working-dead": "TASK_STATE_FAILED", "submitted-dead": "TASK_STATE_FAILED",
                      "working-live": "TASK_STATE_WORKING", "done": "TASK_STATE_COMPLETED",
                      "unowned": "TASK_STATE_WORKING"}
    row = A2ATask.objects.get(pk="working-dead")
    assert (row.version, row.process) == (4, "")
    stored = Task()
    stored.ParseFromString(bytes(row.task))
    assert stored.status.message.parts[0].text == REASON
    [event] = A2ATaskEvent.objects.filter(task=row)
    response = StreamResponse()
    response.ParseFromString(bytes(event.data))
    assert event.version == 4 and response.status_update.status.state == TaskState.TASK_STATE_FAILED

    assert tasks_mark_failed([DEAD]) == 0  # once
    assert tasks_mark_failed([], include_unowned=True) == 1  # at start: a running task naming no process
    assert A2ATask.objects.get(pk="unowned").state == "TASK_STATE_FAILED"

"""Tasks whose process died: their run is gone, so they end `failed` instead of staying `working` for ever
(the agentsite.core.processes sweeper; a follower in another process then sees the final status)."""

from __future__ import annotations

from django.db import transaction

from a2a_app.models import A2ATask, A2ATaskEvent
from agentsite.core.processes import owned_by

REASON = "The server process running this task stopped before it ended; send the message again."


def tasks_mark_failed(dead: list[str], include_unowned: bool = False) -> int:
    """Each task a dead process ran (include_unowned: also a running task that names no process) becomes
    `failed`, with a status message saying why and the event that says so. Ended tasks name no process."""
    candidates = list(A2ATask.objects.filter(owned_by(dead, include_unowned))
                      .exclude(state__in=_terminal_names()).values_list("pk", flat=True))
    if not candidates:  # the usual case: a2a-sdk is imported only when there is a task to end
        return 0
    marked = 0
    for task_id in candidates:
        marked += _fail(task_id, dead, include_unowned)
    return marked


def _terminal_names() -> list[str]:
    return ["TASK_STATE_COMPLETED", "TASK_STATE_CANCELED", "TASK_STATE_FAILED", "TASK_STATE_REJECTED"]


def _fail(task_id: str, dead: list[str], include_unowned: bool) -> int:
    # Imported here: the sweeper runs in every process, a2a-sdk (~20 MiB) is loaded only when a task must end.
    from a2a.helpers.proto_helpers import new_text_message
    from a2a.types.a2a_pb2 import Role, Task, TaskState, TaskStatus, TaskStatusUpdateEvent
    from a2a.utils.proto_utils import to_stream_response

    with transaction.atomic():
        row = (A2ATask.objects.select_for_update().filter(owned_by(dead, include_unowned), pk=task_id)
               .exclude(state__in=_terminal_names()).first())
        if row is None:  # ended, or taken up by a live process, meanwhile
            return 0
        task = Task()
        task.ParseFromString(bytes(row.task))
        status = TaskStatus(state=TaskState.TASK_STATE_FAILED, message=new_text_message(
            REASON, context_id=task.context_id, task_id=task.id, role=Role.ROLE_AGENT))
        status.timestamp.GetCurrentTime()
        task.status.CopyFrom(status)
        event = TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=status)
        row.version += 1
        row.task, row.state, row.process = task.SerializeToString(), TaskState.Name(status.state), ""
        row.save(update_fields=["version", "task", "state", "process", "updated_at"])
        A2ATaskEvent.objects.create(task=row, version=row.version, data=to_stream_response(event).SerializeToString())
    return 1

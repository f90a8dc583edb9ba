"""Where A2A tasks live: the Django ORM, shared by every process and host (a2a-sdk's cluster interfaces).

`OrmTaskStore` is a `VersionedTaskStore`: each task is one A2ATask row holding the SDK's Task as protobuf bytes,
and its `version` counts writes. A write is one compare-and-swap statement (an UPDATE naming the version it read,
or an INSERT for the first), so two writers never both win, on SQLite as on PostgreSQL; a cancel overwrites any
task that has not ended (the SDK's rule). The event that produced a write is appended to A2ATaskEvent in the same
transaction, so `OrmEventStream` can replay a task's events to a follower in any process.

Every read and write is scoped to the caller's principal (`owner_of`): another caller's task id is not found.
A cancel written here is announced (`CANCEL_TOPIC`), so the process running the task stops its run at once
(a2a_app.server.executor) instead of at its next write.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from a2a.server.cluster.event_stream import TaskEventStream, VersionedEvent
from a2a.server.cluster.task_store import ConcurrentTaskModificationError, StoredTask, VersionedTaskStore
from a2a.server.cluster.version import TaskVersion
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.types.a2a_pb2 import ListTasksRequest, ListTasksResponse, StreamResponse, Task, TaskState
from a2a.utils.proto_utils import to_stream_response
from django.db import IntegrityError, transaction
from django.db.models import F

from a2a_app.models import A2ATask, A2ATaskEvent
from agentsite.core import invalidation
from agentsite.core.dbcall import db

CANCEL_TOPIC = "a2a.cancel"  # key: the task id, announced once a cancel is committed
TERMINAL = frozenset({TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_FAILED,
                      TaskState.TASK_STATE_REJECTED})
TERMINAL_NAMES = frozenset(TaskState.Name(state) for state in TERMINAL)
# A follower in another process reads the event log this often while nothing new is there.
FOLLOW_POLL_S = 0.2
LIST_PAGE_MAX = 100


class CallState:
    """What the A2A door resolved for a call (a2a_app.server.asgi), kept in the SDK's ServerCallContext.state."""

    KEY = "agentsite"

    def __init__(self, *, identity: Any, slug: str, settings: Any, caller: Any, is_admin: bool | None,
                 process: str = ""):
        self.identity = identity
        self.slug = slug
        self.settings = settings
        self.caller = caller
        self.is_admin = is_admin
        self.process = process

    @property
    def user_id(self) -> int:
        return int(self.identity.user_id)

    @property
    def owner(self) -> str:
        return principal(self.user_id)


def principal(user_id: int) -> str:
    """The owner of a user's tasks: the user, whichever of their credentials asks (a key, a token, OAuth)."""
    return f"user:{user_id}"


def call_state(context: ServerCallContext) -> CallState:
    state = context.state.get(CallState.KEY)
    if not isinstance(state, CallState):  # the door always sets it: a call without it is a wiring mistake
        raise RuntimeError("An A2A call reached the task store without the door's call state.")
    return state


def owner_of(context: ServerCallContext) -> str:
    return call_state(context).owner


def state_name(task: Task) -> str:
    return TaskState.Name(task.status.state)


# --- the ORM, on database threads ------------------------------------------------------------------------

def _save_now(*, task: Task, event_bytes: bytes | None, prev_version: int, state: CallState) -> int:
    data = task.SerializeToString()
    name = state_name(task)
    ended = name in TERMINAL_NAMES
    with transaction.atomic():
        if task.status.state == TaskState.TASK_STATE_CANCELED:
            # Any task that has not ended: the cancel wins over whatever its runner writes next.
            changed = (A2ATask.objects.filter(pk=task.id, owner=state.owner).exclude(state__in=TERMINAL_NAMES)
                       .update(version=F("version") + 1, task=data, state=name, process=""))
            if not changed:
                raise ConcurrentTaskModificationError(task.id)
            version = A2ATask.objects.filter(pk=task.id).values_list("version", flat=True).get()
            transaction.on_commit(lambda: invalidation.announce(CANCEL_TOPIC, task.id))
        elif prev_version == 0:
            try:
                with transaction.atomic():
                    A2ATask.objects.create(id=task.id, owner=state.owner, user_id=state.user_id,
                                           agent_slug=state.slug, context_id=task.context_id, state=name,
                                           version=1, task=data, process="" if ended else state.process)
            except IntegrityError as exc:
                raise ConcurrentTaskModificationError(task.id) from exc
            version = 1
        else:
            version = prev_version + 1
            changed = (A2ATask.objects.filter(pk=task.id, owner=state.owner, version=prev_version)
                       .update(version=version, task=data, state=name,
                               **({"process": ""} if ended else {})))
            if not changed:
                raise ConcurrentTaskModificationError(task.id)
        if event_bytes is not None:
            A2ATaskEvent.objects.create(task_id=task.id, version=version, data=event_bytes)
    return version


def _get_now(task_id: str, owner: str) -> tuple[bytes, int] | None:
    row = A2ATask.objects.filter(pk=task_id, owner=owner).values_list("task", "version").first()
    return None if row is None else (bytes(row[0]), row[1])


def _list_now(owner: str, slug: str, context_id: str, state: str, page_size: int, offset: int
              ) -> tuple[list[bytes], int]:
    rows = A2ATask.objects.filter(owner=owner, agent_slug=slug)
    if context_id:
        rows = rows.filter(context_id=context_id)
    if state:
        rows = rows.filter(state=state)
    total = rows.count()
    page = rows.order_by("-updated_at", "-pk").values_list("task", flat=True)[offset:offset + page_size]
    return [bytes(data) for data in page], total


def _events_now(task_id: str, owner: str, after_seq: int, after_version: int) -> list[tuple[int, int, bytes]]:
    rows = (A2ATaskEvent.objects.filter(task_id=task_id, task__owner=owner, seq__gt=after_seq,
                                        version__gt=after_version).order_by("seq")
            .values_list("seq", "version", "data"))
    return [(seq, version, bytes(data)) for seq, version, data in rows]


def _owner_of_task_now(task_id: str) -> str | None:
    return A2ATask.objects.filter(pk=task_id).values_list("owner", flat=True).first()


def context_tasks_now(*, owner: str, slug: str, context_id: str, before: str, limit: int) -> list[Task]:
    """The caller's earlier tasks with this agent in this context, oldest first (at most `limit`, the latest)."""
    rows = (A2ATask.objects.filter(owner=owner, agent_slug=slug, context_id=context_id).exclude(pk=before)
            .order_by("-created_at", "-pk").values_list("task", flat=True)[:limit])
    tasks = []
    for data in reversed(list(rows)):
        task = Task()
        task.ParseFromString(bytes(data))
        tasks.append(task)
    return tasks


def stored_state_now(task_id: str) -> str | None:
    return A2ATask.objects.filter(pk=task_id).values_list("state", flat=True).first()


def _int(version: TaskVersion) -> int:
    value = version._value  # noqa: SLF001 - the store's own value, as the SDK's stores read it
    return int(value)


class OrmTaskStore(VersionedTaskStore):
    """The SDK's versioned task store on the Django ORM (see the module docstring)."""

    async def save(self, task: Task, *, event: Event | None, prev: Task | None, prev_version: TaskVersion,
                   context: ServerCallContext) -> TaskVersion:
        del prev
        event_bytes = None if event is None else to_stream_response(event).SerializeToString()
        version = await db(_save_now, task=task, event_bytes=event_bytes, prev_version=_int(prev_version),
                           state=call_state(context))
        return TaskVersion(version)

    async def get(self, task_id: str, context: ServerCallContext) -> StoredTask | None:
        found = await db(_get_now, task_id, owner_of(context))
        if found is None:
            return None
        task = Task()
        task.ParseFromString(found[0])
        return StoredTask(task, TaskVersion(found[1]))

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """The caller's tasks with this agent, newest first; `page_token` is the offset of the page."""
        state = call_state(context)
        size = params.page_size if params.HasField("page_size") and params.page_size > 0 else 50
        size = min(size, LIST_PAGE_MAX)
        offset = int(params.page_token) if params.page_token.isdigit() and params.page_token.isascii() else 0
        status = TaskState.Name(params.status) if params.status else ""
        page, total = await db(_list_now, state.owner, state.slug, params.context_id, status, size, offset)
        tasks = []
        for data in page:
            task = Task()
            task.ParseFromString(data)
            tasks.append(task)
        following = offset + len(tasks)
        return ListTasksResponse(tasks=tasks, page_size=size, total_size=total,
                                 next_page_token=str(following) if following < total else "")

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        owner = owner_of(context)
        await db(lambda: A2ATask.objects.filter(pk=task_id, owner=owner).delete())


class OrmEventStream(TaskEventStream):
    """A task's events for a follower in any process: the log the store appends to, read in order.

    `publish` has nothing to do (the store wrote the event with the task). `subscribe` reads the events newer than
    `after` and then polls every FOLLOW_POLL_S; it ends when it has yielded a terminal status, or the task is gone.
    """

    async def publish(self, task_id: str, event: VersionedEvent) -> None:
        del task_id, event

    async def subscribe(self, task_id: str, *, after: TaskVersion) -> AsyncGenerator[VersionedEvent, None]:
        owner = await db(_owner_of_task_now, task_id)
        if owner is None:
            return
        seq, version = 0, _int(after)
        while True:
            rows = await db(_events_now, task_id, owner, seq, version)
            for row_seq, event_version, data in rows:
                seq = row_seq
                response = StreamResponse()
                response.ParseFromString(data)
                event = _event_of(response)
                yield VersionedEvent(event=event, version=TaskVersion(event_version))
                if _ends(response):
                    return
            if not rows:
                if await db(stored_state_now, task_id) is None:
                    return
                await asyncio.sleep(FOLLOW_POLL_S)

    async def destroy(self, task_id: str) -> None:
        del task_id


def _event_of(response: StreamResponse) -> Event:
    which = response.WhichOneof("payload")
    return getattr(response, which)  # type: ignore[arg-type]


def _ends(response: StreamResponse) -> bool:
    which = response.WhichOneof("payload")
    if which == "status_update":
        return response.status_update.status.state in TERMINAL
    if which == "task":
        return response.task.status.state in TERMINAL
    return which == "message"

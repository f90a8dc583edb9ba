"""An agent's run as an A2A task: the SDK's AgentExecutor over agentsite's agent loop.

A task is one turn of the agent named by the door, run as the caller (their tools, budget, model access; usage
facet `a2a`), after the caller's earlier tasks with this agent in the same `contextId`. In: text parts; data
parts as JSON; file parts (bytes) stored as the caller's uploads and given to the model as chat attachments; a
file by URL is refused. Out: the artifact `reply`, streamed in chunks; a JSON object or array reply also as the
artifact `data` when the caller accepts `application/json`. A tool call, and what a running call reports, are
`working` statuses naming the tool.

Invariants: the Task is enqueued before any status (the SDK's rule); a run ends in one final state; a cancel
from any process closes the run's model request where it runs (CANCEL_TOPIC, or a look at the row).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from typing import TYPE_CHECKING, Any

from a2a.helpers.proto_helpers import new_task, new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue_v2 import EventQueue
from a2a.server.tasks.task_updater import TaskUpdater
from a2a.types.a2a_pb2 import Message as A2AMessage
from a2a.types.a2a_pb2 import Part, Role, Task, TaskState
from google.protobuf import json_format, struct_pb2

from a2a_app.server import store
from agentsite.agent.loop import run_agent_batches
from agentsite.agent.types import MAX_MESSAGE_CHARS, Message, TextPart
from agentsite.core import invalidation
from agentsite.core.dbcall import db
from agentsite.core.errors import AppError
from uploads.selectors import attachment_parts_for
from uploads.services import upload_create

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

logger = logging.getLogger(__name__)

REPLY_ARTIFACT = "reply"
DATA_ARTIFACT = "data"
HISTORY_TASKS = 20  # the earlier tasks of a context a turn sees (the latest)
CANCEL_POLL_S = 1.0  # without an invalidation channel: how often a running task looks for a cancel
CANCEL_POLL_CONNECTED_S = 10.0  # with one: a look now and then all the same (an announcement can be lost)
JSON_MODE = "application/json"

_running: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Event]] = {}  # task id -> its cancel signal here
_lock = threading.Lock()


class Refused(Exception):
    """The message cannot be run (a file by URL, an upload the store refuses, nothing to say): the task fails
    with this reason, and nothing is sent to the model."""


def _on_cancel(task_id: str | None) -> None:
    """The invalidation subscriber: wake the run of the announced task if it runs in this process (None, sent
    when the channel reconnects: wake every run, each then looks at its row)."""
    with _lock:
        signals = list(_running.values()) if task_id is None else [_running[task_id]] if task_id in _running else []
    for loop, signal in signals:
        with contextlib.suppress(RuntimeError):  # its loop closed meanwhile
            loop.call_soon_threadsafe(signal.set)


def connect() -> None:
    """Hear cancels announced by any process (A2AConfig.ready)."""
    invalidation.subscribe(store.CANCEL_TOPIC, _on_cancel)


class AgentsiteExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        state = store.call_state(context.call_context)
        await db(invalidation.listen)  # hear cancels from other processes from now on (at once once listening)
        task_id, context_id = str(context.task_id), str(context.context_id)
        updater = TaskUpdater(event_queue, task_id, context_id)
        if context.current_task is None:
            history = [context.message] if context.message is not None else []
            await event_queue.enqueue_event(new_task(task_id, context_id, TaskState.TASK_STATE_SUBMITTED,
                                                     history=history))
        try:
            messages = await self._conversation(context, state)
        except Refused as exc:
            await updater.failed(_agent_text(str(exc), task_id, context_id))
            return
        await updater.start_work()
        signal = asyncio.Event()
        with _lock:
            _running[task_id] = (asyncio.get_running_loop(), signal)
        run = asyncio.create_task(self._run(messages, state, updater, context))
        watch = asyncio.create_task(_watch_cancel(task_id, signal))
        try:
            done, _pending = await asyncio.wait({run, watch}, return_when=asyncio.FIRST_COMPLETED)
            if run in done:
                run.result()
                return
            run.cancel()  # canceled elsewhere: the model's request is closed here
            with contextlib.suppress(asyncio.CancelledError):
                await run
            with contextlib.suppress(RuntimeError):  # the run reached a final state first
                await updater.cancel()
        finally:
            with _lock:
                if _running.get(task_id, (None, None))[1] is signal:
                    del _running[task_id]
            for task in (run, watch):
                task.cancel()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """A cancel in this process: the SDK has cancelled execute() (and with it the run); mark the task."""
        updater = TaskUpdater(event_queue, str(context.task_id), str(context.context_id))
        await updater.cancel()

    async def _conversation(self, context: RequestContext, state: store.CallState) -> list[Message]:
        earlier = await db(store.context_tasks_now, owner=state.owner, slug=state.slug,
                           context_id=str(context.context_id), before=str(context.task_id), limit=HISTORY_TASKS)
        messages: list[Message] = []
        for task in earlier:
            messages.extend(_turns_of(task))
        if context.message is None:
            raise Refused("The request carries no message.")
        messages.append(await _user_message(context.message, state))
        return messages

    async def _run(self, messages: list[Message], state: store.CallState, updater: TaskUpdater,
                   context: RequestContext) -> None:
        streamed = ""
        async for batch in run_agent_batches(messages=messages, user_id=state.user_id, settings=state.settings,
                                             caller=state.caller, is_admin=state.is_admin):
            chunk = ""
            for event in batch:
                if event.type == "delta":
                    chunk += str(event.data.get("content", ""))
                elif event.type == "tool_call":
                    name = event.data.get("name", "")
                    await updater.update_status(TaskState.TASK_STATE_WORKING, _agent_text(
                        f"Calling the tool {name}.", updater.task_id, updater.context_id))
                elif event.type == "tool_progress":
                    await updater.update_status(TaskState.TASK_STATE_WORKING, _agent_text(
                        f"{event.data.get('name', '')}: {event.data.get('content', '')}", updater.task_id,
                        updater.context_id))
                elif event.type == "done":
                    reply = str(event.data.get("content", ""))
                    await _final_reply(updater, reply, streamed)
                    await _data_artifact(updater, reply, context)
                    await updater.complete()
                    return
                elif event.type == "error":
                    code = event.data.get("code", "upstream_error")
                    await updater.failed(_agent_text(f"{code}: {event.data.get('message', '')}",
                                                     updater.task_id, updater.context_id))
                    return
            if chunk:
                await updater.add_artifact([Part(text=chunk)], artifact_id=_reply_id(updater), name=REPLY_ARTIFACT,
                                           append=bool(streamed), last_chunk=False)
                streamed += chunk
        await updater.failed(_agent_text("upstream_error: the agent's run ended without a reply.",
                                         updater.task_id, updater.context_id))


async def _watch_cancel(task_id: str, signal: asyncio.Event) -> None:
    """Returns once the task's row says CANCELED (woken by the announcement, or looking every so often)."""
    while True:
        every = CANCEL_POLL_CONNECTED_S if invalidation.connected() else CANCEL_POLL_S
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(every):  # not wait_for: on 3.11 it can swallow this task's cancellation
                await signal.wait()
        signal.clear()
        if await db(store.stored_state_now, task_id) == TaskState.Name(TaskState.TASK_STATE_CANCELED):
            return


async def _final_reply(updater: TaskUpdater, reply: str, streamed: str) -> None:
    """The reply artifact's last chunk: what the stream has not sent yet; the whole reply again (replacing the
    chunks) in the rare case the reply does not begin with what was streamed."""
    if reply.startswith(streamed):
        await updater.add_artifact([Part(text=reply[len(streamed):])], artifact_id=_reply_id(updater),
                                   name=REPLY_ARTIFACT, append=bool(streamed), last_chunk=True)
        return
    await updater.add_artifact([Part(text=reply)], artifact_id=_reply_id(updater), name=REPLY_ARTIFACT,
                               append=False, last_chunk=True)


async def _data_artifact(updater: TaskUpdater, reply: str, context: RequestContext) -> None:
    accepted = list(context.configuration.accepted_output_modes) if context.configuration else []
    if accepted and JSON_MODE not in accepted:
        return
    try:
        value = json.loads(reply)
    except ValueError:
        return
    if not isinstance(value, dict | list):
        return
    data = struct_pb2.Value()
    json_format.ParseDict(value, data)
    await updater.add_artifact([Part(data=data, media_type=JSON_MODE)], artifact_id=f"{updater.task_id}-data",
                               name=DATA_ARTIFACT, last_chunk=True)


def _reply_id(updater: TaskUpdater) -> str:
    return f"{updater.task_id}-reply"


def _agent_text(text: str, task_id: str, context_id: str) -> A2AMessage:
    return new_text_message(text, context_id=context_id, task_id=task_id, role=Role.ROLE_AGENT)


def _turns_of(task: Task) -> list[Message]:
    """An earlier task as conversation: the caller's messages, then the agent's reply (its `reply` artifact)."""
    turns: list[Message] = []
    for message in task.history:
        if message.role == Role.ROLE_USER:
            text = "\n".join(part.text for part in message.parts if part.HasField("text"))
            if text:
                turns.append(Message("user", text))
    reply = "".join(part.text for artifact in task.artifacts if artifact.name == REPLY_ARTIFACT
                    for part in artifact.parts if part.HasField("text"))
    if reply:
        turns.append(Message("assistant", reply))
    return turns


async def _user_message(message: A2AMessage, state: store.CallState) -> Message:
    """The caller's message as the model gets it: its text parts, each data part as JSON, its files as uploads."""
    texts: list[str] = []
    files: list[tuple[str, bytes]] = []
    for index, part in enumerate(message.parts):
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind == "data":
            texts.append(json.dumps(json_format.MessageToDict(part.data), ensure_ascii=False))
        elif kind == "raw":
            files.append((part.filename or f"file-{index + 1}", bytes(part.raw)))
        elif kind == "url":
            raise Refused(f"parts.{index}: a file by URL is not fetched; send its bytes (`raw`) instead.")
    text = "\n".join(texts)
    if len(text) > MAX_MESSAGE_CHARS:
        raise Refused(f"message_too_long: at most {MAX_MESSAGE_CHARS} characters of text (this message has "
                      f"{len(text)}).")
    if not files:
        if not text.strip():
            raise Refused("The message has no text and no file.")
        return Message("user", text)
    try:
        parts = await db(_uploaded_parts, state.identity.user, files)
    except AppError as exc:
        raise Refused(f"{exc.code}: {exc.message}") from exc
    return Message("user", [TextPart(text), *parts] if text else parts)


def _uploaded_parts(user: AbstractBaseUser, files: list[tuple[str, bytes]]) -> list[Any]:
    ids = [str(upload_create(owner_id=user.pk, filename=name, data=data).pk) for name, data in files]
    found = attachment_parts_for(user, ids)
    return [part for upload_id in ids for part in found[upload_id]]

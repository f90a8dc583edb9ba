"""The agent-turn service: one turn of the agent in a chat session, from the user's message to the stored reply.

`turn_start` does everything that can fail with an HTTP status and stores the user message with the reply as
`streaming`, in one crossing to a database thread; `ChatTurn.events()` then runs the agent and stores the reply
once, however it ends: `complete`, `error` (what streamed is kept) or `interrupted` (the consumer stopped).
What has been generated is checkpointed into the reply, so a process that dies leaves it `interrupted` with its
last checkpoint (agentsite.core.processes). In a live process every reply the opening write stores ends final.

The chat stream and scheduled prompts that name a session call this; code that runs the agent with no session
calls `agentsite.agent.loop.run_agent` itself.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from agentsite.agent.config import AgentSettings
from agentsite.agent.loop import AgentEvent, Prepared, Transcript, prepare_now, run_agent_batches
from agentsite.agent.modelchoice import model_checked
from agentsite.agent.routing import resolve
from agentsite.agent.types import MAX_MESSAGE_CHARS, Message
from agentsite.agent.usage import Caller, caller_for
from agentsite.core.dbcall import db_started
from agentsite.core.diskspace import free_space_check
from agentsite.core.errors import AppError
from sessions_app import agents, selectors, services, stops, titles
from sessions_app.attachments import attachments_resolve
from sessions_app.history import to_agent_messages
from sessions_app.models import ChatMessage, ChatSession

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

logger = logging.getLogger(__name__)

CHECKPOINT_S = 1.0


class ChatTurn:
    """A turn whose user message is stored. Iterate `events()` or `batches()` once; `status` says how the reply
    was stored (None until it was) and `transcript` holds what the agent produced."""

    def __init__(self, *, session: ChatSession, owner_id: int, messages: list[Message], settings: AgentSettings,
                 user_message_id: uuid.UUID | None, reply_id: uuid.UUID, owner_is_admin: bool | None = None,
                 parent: uuid.UUID | None = None, agent: str = ""):
        self.session = session
        self.parent = parent  # the message the reply follows (its question)
        self.agent = agent  # the slug of the agent that answers
        self.owner_id = owner_id
        self.owner_is_admin = owner_is_admin  # as the request authenticated the owner (an API key's scopes)
        self.messages = messages
        self.settings = settings
        self.user_message_id = user_message_id
        self.reply_id = reply_id
        self.transcript = Transcript()
        self.status: str | None = None
        self.caller: Caller | None = None  # who the model's calls are metered for (default: the owner, `chat`)
        self._checkpointed_at = 0.0
        self._checkpoint: asyncio.Future | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.prepared: Prepared | None = None  # the run's context and tools, asked already (loop.prepare_now)
        self._owner: asyncio.Task | None = None  # the task whose end, with the reply not stored, interrupts it
        self._stopping = False  # a stop request reached the turn (stop()): it ends `stopped`
        self._in_run: asyncio.Task | None = None  # the task awaiting the agent's next batch: a stop cancels it
        self._stop_cancelled = False  # stop() cancelled the owner (batches() takes back that one cancellation)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started_at = 0.0
        self.ttft_ms: int | None = None  # from the start of the run to the first text
    def _belong_to(self, task: asyncio.Task) -> None:
        self._owner = task
        task.add_done_callback(self._on_owner_done)

    def _on_owner_done(self, task: asyncio.Task) -> None:
        if self.status is None and self._owner is task:  # nothing runs the turn any more, nor ever will
            self._store_started(self._ended_status())

    def _ended_status(self) -> str:
        """How a reply whose turn ends early is stored: `stopped` once a stop request reached it (a hang-up
        racing the stop keeps it so), else `interrupted`."""
        return "stopped" if self._stopping else "interrupted"

    def event(self, kind: str, data: dict[str, Any]) -> AgentEvent:
        return AgentEvent(kind, data, self.transcript)

    def stop(self) -> None:
        """End the run now and store what it generated as `stopped` (from the turn's event loop: sessions_app.stops
        calls it there). Nothing once the reply is being stored. While the task running the turn awaits the
        agent (the model, a tool), that await is cancelled and batches() takes the cancellation back; between two
        batches it ends at the next one. Either way its consumer receives `done` with status `stopped`. Only
        that await is cancelled: a consumer's own code between events (the scheduler's) never sees it."""
        if self.status is not None or self._stopping:
            return
        self._stopping = True
        if self._in_run is not None and not self._in_run.done():
            self._stop_cancelled = True
            self._in_run.cancel()

    def stop_threadsafe(self) -> None:
        """stop(), from any thread."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.stop)

    def _done_event(self, data: dict[str, Any], status: str) -> AgentEvent:
        return self.event("done", {"message_id": str(self.reply_id), **data, "status": status,
                                   "sources": self.transcript.sources,
                                   "steps": selectors.steps_of(self.transcript.tool_calls()),
                                   "model": self._answered(), "agent": self.agent, "ttft_ms": self.ttft_ms})

    def _answered(self) -> str:
        return self.transcript.answered or self.settings.model

    async def events(self) -> AsyncIterator[AgentEvent]:
        """`start {message_id, session_id}`, the agent's events, then `done` (with `message_id`) or `error`.

        Never raises but CancelledError; closing or cancelling it stores the reply as `interrupted`.
        """
        async with aclosing(self.batches()) as batches:
            async for batch in batches:
                for event in batch:
                    yield event

    async def batches(self) -> AsyncIterator[list[AgentEvent]]:
        """events() in lists of those that were ready together (run_agent_batches): the chat stream writes
        each list at once. `done` and `error` come alone, after the reply is stored."""
        # The first checkpoint comes CHECKPOINT_S after the start (or after a tool result), not with the first
        # delta: a reply that ends sooner is stored once, by the final store, with no write racing it.
        self._checkpointed_at = self._started_at = time.monotonic()
        self._loop = asyncio.get_running_loop()
        runner = asyncio.current_task()
        if runner is not None and runner is not self._owner:  # the chat stream runs it in a task of its own
            self._belong_to(runner)
        stops.running(self)
        self._watch(CHECKPOINT_S)  # checkpoints come even while the model is silent: see _maybe_checkpoint
        try:
            # In the try: a consumer that stops right after `start` still leaves the reply `interrupted`.
            yield [self.event("start", {
                "message_id": str(self.reply_id), "session_id": str(self.session.pk),
                "user_message_id": str(self.user_message_id) if self.user_message_id else None,
                "parent": str(self.parent) if self.parent else None})]
            caller = self.caller or caller_for(self.owner_id, "chat")
            try:
                async with aclosing(run_agent_batches(
                        messages=self.messages, user_id=self.owner_id, is_admin=self.owner_is_admin,
                        settings=self.settings, transcript=self.transcript, caller=caller,
                        prepared=self.prepared)) as run:
                    while not self._stopping:
                        self._in_run = asyncio.current_task()  # the consumer's, whichever drives it now
                        try:
                            batch = await anext(run)
                        except StopAsyncIteration:
                            break
                        finally:
                            self._in_run = None
                        event = batch[-1]
                        if event.type not in ("done", "error"):
                            if self.ttft_ms is None and any(item.type == "delta" for item in batch):
                                self.ttft_ms = round((time.monotonic() - self._started_at) * 1000)
                            self._maybe_checkpoint(force=any(item.type == "tool_result" for item in batch))
                            yield batch
                            continue
                        stored = await self._store("complete" if event.type == "done" else "error")
                        if not stored:
                            yield [self._session_gone()]
                        elif event.type == "done":
                            yield [self._done_event(event.data, "complete")]
                            titled = await titles.title_event(self)  # a session still "New chat" gets a name
                            if titled is not None:
                                yield [titled]
                        else:
                            yield [event]
                        return
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not self._stop_cancelled or self.status is not None or task is None or task.cancelling() != 1:
                    raise  # a hang-up, or a stop that came with one: stored as _ended_status() says (below)
                task.uncancel()  # the stop's own cancellation, taken back: the turn ends here, stored `stopped`
            if self._stopping:
                async for batch in self._stopped():
                    yield batch
                return
            # The loop ended without done or error (a bug): never lose what streamed.
            await self._store("error")
            yield [self.event("error", {"code": "internal_error", "message": "The agent stopped without an answer."})]
        finally:
            stops.ended(self)
            if self._timer is not None:
                self._timer.cancel()
            if self.status is None:  # closed or cancelled before the turn ended
                try:
                    await self._store(self._ended_status())
                except Exception:  # logged by _log_failure; the close or cancellation in flight goes on
                    pass

    async def _stopped(self) -> AsyncIterator[list[AgentEvent]]:
        """The end of a stopped turn: what it generated stored `stopped`, then `done` with that status."""
        self.transcript.finish_reason = "stopped"
        if await self._store("stopped"):
            yield [self._done_event({"content": self.transcript.text, "finish_reason": "stopped",
                                     "usage": self.transcript.usage.as_dict()}, "stopped")]
        else:
            yield [self._session_gone()]

    def _maybe_checkpoint(self, *, force: bool = False) -> None:
        """Save what was generated so far, in the background: at most one write in flight, and at most one
        per CHECKPOINT_S unless forced; what a skipped call would have saved is saved by a timer when the
        interval is over, so a stream that goes quiet is still saved whole. A checkpoint never delays the
        stream, and one that lands after the final store changes nothing (it only updates a `streaming` reply).
        The timer is armed again after each checkpoint (_watch): while the model is silent or a tool runs, the
        reply is still checkpointed every CHECKPOINT_S, so a stop whose announcement never reached this process
        still ends the turn within about CHECKPOINT_S (the checkpoint is refused).
        """
        if self.status is not None:
            return
        now = time.monotonic()
        wait = 0.0 if force else self._checkpointed_at + CHECKPOINT_S - now
        if wait > 0 or (self._checkpoint is not None and not self._checkpoint.done()):
            self._watch(max(wait, 0.05))
            return
        self._checkpointed_at = now
        transcript = self.transcript
        self._checkpoint = db_started(services.message_checkpoint_reply, message_id=self.reply_id,
                                      content=transcript.text, tool_calls=transcript.tool_calls(),
                                      sources=transcript.sources)
        self._checkpoint.add_done_callback(self._on_checkpoint)

    def _on_checkpoint(self, write: asyncio.Future) -> None:
        _log_checkpoint_failure(write)
        # Not written, though this turn still streams: a stop request marked the reply `stopped` (and its
        # announcement has not arrived, or was lost), or the session was deleted. Either way the run ends.
        if not write.cancelled() and write.exception() is None and write.result() is False:
            self.stop()
        else:
            self._watch(CHECKPOINT_S)

    def _watch(self, delay: float) -> None:
        """A checkpoint in `delay` seconds, unless one is due already or the reply is stored (from the loop)."""
        if self._timer is None and self.status is None and self._loop is not None:
            self._timer = self._loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._maybe_checkpoint()

    def _session_gone(self) -> AgentEvent:
        return self.event("error", {"code": "not_found", "message": "The session was deleted during the reply."})

    async def _store(self, status: str) -> bool:
        """Store the reply with this status; False when the session was deleted meanwhile (nothing stored)."""
        # Marked first, so that a hang-up during the write cannot store the reply a second time; shielded,
        # so that the write finishes even when this task is cancelled meanwhile (the cancellation still
        # reaches the caller, and is never replaced by another exception).
        try:
            await asyncio.shield(self._store_started(status))
        except ChatSession.DoesNotExist:
            return False
        return True

    def _store_started(self, status: str) -> asyncio.Future:
        """_store's write, handed to a database thread before this returns (`done` waits for it); from the loop."""
        self.status = status
        transcript = self.transcript
        usage = transcript.usage.as_dict() if transcript.usage.total_tokens else {}
        fields = dict(session=self.session, message_id=self.reply_id, role="assistant", content=transcript.text,
                      status=status, tool_calls=transcript.tool_calls(), sources=transcript.sources, usage=usage,
                      finish_reason=transcript.finish_reason or ("interrupted" if status == "interrupted" else ""),
                      model=self._answered(), ttft_ms=self.ttft_ms)
        write = db_started(services.message_finish_reply, **fields)
        write.add_done_callback(_log_failure)
        return write


def _log_checkpoint_failure(write: asyncio.Future) -> None:
    if not write.cancelled() and write.exception() is not None:
        logger.warning("Checkpointing a streaming reply failed (the final store still follows)",
                       exc_info=write.exception())


def _log_failure(write: asyncio.Future) -> None:
    # Read here, so that a write whose caller was cancelled meanwhile does not fail unnoticed.
    if write.cancelled():
        return
    error = write.exception()
    if isinstance(error, ChatSession.DoesNotExist):
        logger.info("A reply was not stored: its session was deleted during the turn")
    elif error is not None:
        logger.error("Storing a reply failed", exc_info=error)


async def turn_start(*, owner: AbstractBaseUser, session_id: uuid.UUID, message: str | None,
                     attachments: list[str] | None = None, model: str | None = None,
                     overrides: dict[str, Any] | None = None, agent: str | None = None,
                     parent: uuid.UUID | str | None = selectors.CURRENT,
                     regenerate: uuid.UUID | None = None) -> ChatTurn:
    """Check the turn, store the user message (and the reply as `streaming`), and return the turn ready to run.

    The user message follows `parent` (selectors.turn_history: the session's current message by default, None
    for a new first question, or an assistant message's id: an edit makes a sibling of the edited question);
    the history the model receives is the path down to it, never a sibling branch. With `regenerate` (an
    assistant message's id; `message` None) no user message is stored: the reply is a new sibling of that one,
    answering the same question from the same history. Either way the new reply becomes the session's current.

    The turn runs the session's agent (sessions_app.agents: its instructions, model, tools and knowledge, for
    the owner), or `agent` when given (a slug, this turn only: a scheduled task's). The turn's model is `model`
    when given (this turn only: a chat request's or a scheduled task's), else the session's `model`, else the
    agent's; it answers through the router (fallback, balance). `overrides` replace settings for this turn
    (tests point it at an upstream this way).

    Raises AppError 404 `not_found` (another user's or a missing session; an attachment that is not one of
    owner's uploads; the agent is not one the owner may use (any more), naming `agent`), 400 `invalid` (`model`
    is not in the catalogue), 404 `model_not_found` (the session's stored model no longer is), 400
    `message_too_long` and 507 `insufficient_storage` (the disk is nearly full); in each case nothing is stored.

    The turn belongs to the calling task: run it there, or start its `events()`/`batches()` in another task,
    before the calling task ends; else its reply is stored `interrupted` unrun. This covers a caller cancelled
    while the opening write was in flight on its thread (the write lands, nobody receives the turn) and a turn
    dropped before it ran (a client that hung up between the opening write and the stream's first step).
    """
    opening = db_started(_turn_prepare, owner=owner, session_id=session_id, message=message,
                         upload_ids=[str(upload) for upload in attachments or []], model=model,
                         overrides=overrides or {}, agent=agent, parent=parent, regenerate=regenerate)
    caller = asyncio.current_task()
    if caller is not None:
        # Added before the caller can see the turn, and called even when the caller was cancelled meanwhile:
        # the write goes on in its thread (agentsite.core.dbcall), and the reply it stores must not stay streaming.
        opening.add_done_callback(functools.partial(_opened, caller=caller))
    return await asyncio.shield(opening)


def _opened(opening: asyncio.Future, *, caller: asyncio.Task) -> None:
    if not opening.cancelled() and opening.exception() is None:
        opening.result()._belong_to(caller)  # a caller already gone: its reply is stored interrupted at once


def _turn_model(session: ChatSession, model: str | None, settings: AgentSettings) -> AgentSettings:
    """The settings with the turn's model, checked against the catalogue before anything is stored."""
    if model:
        return settings.with_overrides(model=model_checked(model, settings=settings))
    if session.model:
        resolve(session.model, settings)  # 404 model_not_found naming it: its connection was removed since
        return settings.with_overrides(model=session.model)
    return settings


def _turn_agent(owner: AbstractBaseUser, session: ChatSession, agent: str | None) -> AgentSettings:
    """The settings of the turn's agent for the owner: `agent` (this turn's), else the session's. An agent the
    owner may no longer use (unshared, deleted, made private since the session chose it) refuses the turn."""
    if agent is not None:
        return agents.settings_now(owner, agent)
    slug = session.agent_slug
    try:
        return agents.settings_now(owner, slug)
    except AppError as exc:
        if exc.code != "not_found":
            raise
        raise agents.unavailable(slug, f"The session's agent {slug!r} is no longer available to you; choose "
                                 "another with PATCH /api/sessions/:id {\"agent\": ...}.") from None


def _turn_prepare(*, owner: AbstractBaseUser, session_id: uuid.UUID, message: str | None, upload_ids: list[str],
                  model: str | None, overrides: dict[str, Any], agent: str | None = None,
                  parent: uuid.UUID | str | None = selectors.CURRENT, regenerate: uuid.UUID | None = None) -> ChatTurn:
    """turn_start's work, on one database thread: the checks and reads, the context and tools when they can be
    asked here, then the one write."""
    stops.listening()
    found = selectors.turn_history(owner=owner, session_id=session_id, parent=parent, regenerate=regenerate)
    session, history = found.session, found.path
    settings = _turn_agent(owner, session, agent)
    if overrides:
        settings = settings.with_overrides(**overrides)
    settings = _turn_model(session, model, settings)
    if message is not None and len(message) > MAX_MESSAGE_CHARS:
        raise AppError("message_too_long", f"A message may be at most {MAX_MESSAGE_CHARS} characters.", 400,
                       {"message": [f"{len(message)} characters; the limit is {MAX_MESSAGE_CHARS}."]})
    free_space_check()
    parts = attachments_resolve(owner=owner, upload_ids=upload_ids)
    # Earlier turns' attachments go with them: a follow-up question about an image still shows the image.
    earlier = [str(upload) for stored in history if stored.role == "user" for upload in stored.attachments]
    parts = {**attachments_resolve(owner=owner, upload_ids=[upload for upload in earlier if upload not in parts],
                                   missing_ok=True), **parts}
    user_message = (ChatMessage(id=uuid.uuid4(), role="user", content=message, attachments=upload_ids)
                    if message is not None else None)
    messages = to_agent_messages([*history, user_message] if user_message is not None else history, parts)
    is_admin = bool(owner.is_active and owner.is_staff)
    slug = agent if agent is not None else session.agent_slug
    turn = ChatTurn(session=session, owner_id=owner.pk, messages=messages, settings=settings,
                    user_message_id=user_message.pk if user_message is not None else None, reply_id=uuid.uuid4(),
                    owner_is_admin=is_admin, parent=user_message.pk if user_message is not None else found.parent,
                    agent=slug)
    # The context and the tools too, in this same database call, when every source can answer so (no MCP
    # server to connect): the run does not cross to a database thread again before it asks the model.
    turn.prepared = prepare_now(messages=messages, user_id=owner.pk, is_admin=is_admin, settings=settings)
    try:
        services.turn_messages_store(session=session, user_message=user_message, reply_id=turn.reply_id,
                                     parent=found.parent, agent=slug)
    except ChatSession.DoesNotExist:  # deleted since it was read
        raise AppError("not_found", "No such session.", 404) from None
    return turn

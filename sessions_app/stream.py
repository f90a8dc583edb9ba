"""The chat SSE stream: run the agent, relay its events, store the turn however it ends.

The generator is consumed by an async StreamingHttpResponse; under daphne a client hang-up cancels it
within milliseconds (NOTES.md), and cancelling the producer task closes the upstream LLM request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings as django_settings

from agentsite.agent.config import AgentSettings
from agentsite.agent.types import Message
from agentsite.errors import AppError
from sessions_app.history import TurnRecord
from sessions_app.models import ChatSession
from sessions_app.services import message_store_reply

logger = logging.getLogger(__name__)

_END = object()


def sse(event: str, data: dict[str, Any]) -> bytes:
    # ensure_ascii: text from a model or tool may hold a lone surrogate, which UTF-8 cannot encode.
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def keepalive_interval() -> float:
    return float(getattr(django_settings, "AGENTSITE_SSE_KEEPALIVE_S", 10.0))


async def chat_events(*, session: ChatSession, owner: Any, messages: list[Message],
                      agent_settings: AgentSettings) -> AsyncIterator[bytes]:
    """SSE bytes for one turn: start, deltas/tool events, then done or error (keep-alives in between)."""
    reply_id = uuid.uuid4()
    turn = TurnRecord()
    queue: asyncio.Queue = asyncio.Queue()
    producer = asyncio.create_task(_produce(queue, messages, owner.pk, agent_settings))
    stored = False
    try:
        yield sse("start", {"message_id": str(reply_id), "session_id": str(session.pk)})
        while True:
            try:
                event = await asyncio.wait_for(queue.get(), timeout=keepalive_interval())
            except TimeoutError:
                yield b": keep-alive\n\n"
                continue
            if event is _END:
                break
            event_type, data = event
            turn.record(event_type, data)
            if event_type == "done":
                stored = True  # set first: a hang-up during the write must not store the reply twice
                await _store(session, reply_id, turn, "complete")
                yield sse("done", {"message_id": str(reply_id), "content": turn.content,
                                   "finish_reason": turn.finish_reason or "stop", "usage": _usage(turn.usage),
                                   "sources": turn.sources})
                break
            if event_type == "error":
                stored = True
                await _store(session, reply_id, turn, "error")
                yield sse("error", {"code": data.get("code", "upstream_error"), "message": data.get("message", "")})
                break
            yield sse(event_type, data)
        if not stored:  # the agent ended without done or error: treat as a failure, never lose the text
            stored = True
            await _store(session, reply_id, turn, "error")
            yield sse("error", {"code": "internal_error", "message": "The agent stopped without an answer."})
    except (asyncio.CancelledError, GeneratorExit):
        producer.cancel()
        if not stored:
            # The client hung up: keep what was generated, marked interrupted. Shielded so a second
            # cancellation cannot lose the write.
            await asyncio.shield(asyncio.ensure_future(_store(session, reply_id, turn, "interrupted")))
        raise
    except Exception as exc:  # boundary: e.g. the session was deleted mid-stream; end with one error event
        logger.exception("The chat stream failed")
        code = "not_found" if isinstance(exc, ChatSession.DoesNotExist) else "internal_error"
        yield sse("error", {"code": code, "message": "The reply could not be stored; the error was logged."})
    finally:
        producer.cancel()


async def _produce(queue: asyncio.Queue, messages: list[Message], user_id: Any, agent_settings: AgentSettings) -> None:
    from agentsite.agent.loop import run_agent  # the runtime loads on first chat, not at URL import

    try:
        async for event in run_agent(messages=messages, user_id=user_id, settings=agent_settings):
            await queue.put((event.type, dict(event.data)))
    except asyncio.CancelledError:
        raise
    except AppError as exc:
        await queue.put(("error", {"code": exc.code, "message": exc.message}))
    except Exception:  # boundary: the stream must end with one error event, never a broken connection
        logger.exception("The agent failed while streaming a chat reply")
        await queue.put(("error", {"code": "internal_error", "message": "The agent failed; the error was logged."}))
    finally:
        queue.put_nowait(_END)


def _usage(usage: dict[str, int]) -> dict[str, int]:
    prompt, completion = int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


async def _store(session: ChatSession, reply_id: uuid.UUID, turn: TurnRecord, status: str) -> None:
    await sync_to_async(message_store_reply)(
        session=session, role="assistant", content=turn.content, message_id=reply_id, status=status,
        tool_calls=turn.tool_calls, sources=turn.sources, usage=_usage(turn.usage) if turn.usage else {},
        finish_reason=turn.finish_reason or ("interrupted" if status == "interrupted" else ""))

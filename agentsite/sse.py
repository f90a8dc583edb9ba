"""Server-sent events for every stream the service sends: framing, keep-alives and the response.

The chat stream, the /v1 streams and the workflow stream all frame their events here, so a client parses
one format: `event: NAME\\n` (when named) `data: JSON\\n\\n`, with `: keep-alive` comments while idle.

Cancellation (docs/notes.md): Django cancels a streaming async generator once when the client hangs up. On
Python 3.11, `asyncio.wait_for` can swallow that cancellation when the awaited item arrives in the same
loop step, and the hang-up is lost for good; every wait here uses `asyncio.timeout` instead, which
re-raises an outside cancellation whatever else happened in that step.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.http import StreamingHttpResponse

T = TypeVar("T")

KEEPALIVE = b": keep-alive\n\n"


def sse_event(data: Any, event: str | None = None) -> bytes:
    """One event. `data` is JSON-encoded unless it is already a string (OpenAI's `[DONE]`)."""
    # ensure_ascii: text from a model or a tool may hold a lone surrogate, which UTF-8 cannot encode.
    payload = data if isinstance(data, str) else json.dumps(data)
    return (f"event: {event}\n" if event else "").encode() + f"data: {payload}\n\n".encode()


def sse_response(stream: AsyncIterator[bytes]) -> StreamingHttpResponse:
    """A streaming response that proxies (X-Accel-Buffering) and caches leave alone. Each event reaches the
    socket as it is sent (under daphne, agentsite.asgi_limits flushes every streamed chunk)."""
    response = StreamingHttpResponse(stream, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


@dataclass(frozen=True)
class _Item(Generic[T]):
    value: T


@dataclass(frozen=True)
class _Failed:
    error: BaseException


_END = object()


async def with_keepalive(events: AsyncIterator[T], interval: float) -> AsyncIterator[T | None]:
    """`events`, with None whenever `interval` seconds pass without one (the caller sends a keep-alive).

    The events are pulled by a task of their own, so a timeout never interrupts the producer. When this
    generator is cancelled or closed, that task is cancelled and awaited: the producer's own clean-up (a
    turn stored as interrupted, an upstream request closed) has finished when this one's has. An exception
    the producer raises is raised here.
    """
    queue: asyncio.Queue[Any] = asyncio.Queue()
    pump = asyncio.create_task(_pump(events, queue))
    try:
        while True:
            try:
                async with asyncio.timeout(interval):
                    item = await queue.get()
            except TimeoutError:
                yield None
                continue
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item.value
    finally:
        if not pump.done():
            pump.cancel()
        # asyncio.wait never swallows a cancellation of this task: a second hang-up signal still ends it,
        # and the pump then finishes its clean-up on its own.
        await asyncio.wait({pump})


async def _pump(events: AsyncIterator[T], queue: asyncio.Queue[Any]) -> None:
    try:
        async for event in events:
            queue.put_nowait(_Item(event))
    except asyncio.CancelledError:
        raise
    except BaseException as exc:  # handed to the consumer, which raises it in its own task
        queue.put_nowait(_Failed(exc))
    finally:
        queue.put_nowait(_END)

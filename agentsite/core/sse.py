"""Server-sent events for every stream the service sends: framing, keep-alives and the response.

Every stream frames its events here (`event: NAME` when named, `data: JSON`, `: keep-alive` while idle), so a
client parses one format. A stream whose credential dies while open ends at its next event (`ended_when`,
`SseGuard`). Every wait uses `asyncio.timeout`, not `asyncio.wait_for`, which on Python 3.11 can swallow the
cancellation Django sends when a client hangs up (docs/notes.md).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from typing import TYPE_CHECKING, Any, TypeVar

from django.http import StreamingHttpResponse

from agentsite.core import metrics

if TYPE_CHECKING:
    from agentsite.core.errors import AppError

T = TypeVar("T")

KEEPALIVE = b": keep-alive\n\n"


def sse_event(data: Any, event: str | None = None) -> bytes:
    """One event. `data` is JSON-encoded unless it is already a string (OpenAI's `[DONE]`)."""
    # ensure_ascii: text from a model or a tool may hold a lone surrogate, which UTF-8 cannot encode.
    payload = data if isinstance(data, str) else json.dumps(data)
    return (f"event: {event}\n" if event else "").encode() + f"data: {payload}\n\n".encode()


def json_text(text: str) -> bytes:
    """A string as JSON, byte for byte what json.dumps(text).encode() gives (ASCII, escaped), for the text of
    a stream's many delta events: json.dumps' own dispatch costs ~1 us, about four times the escaping."""
    return encode_basestring_ascii(text).encode()


def error_event(exc: AppError) -> bytes:
    """The API's terminal `error {code, message}` event (the chat and workflow streams)."""
    return sse_event({"code": exc.code, "message": exc.message}, "error")


Problem = Callable[[], Awaitable["AppError | None"]]


async def ended_when(stream: AsyncGenerator[bytes, None], problem: Problem,
                     end: Callable[[AppError], bytes] = error_event) -> AsyncGenerator[bytes, None]:
    """`stream`, with `problem()` awaited before each of its events (keep-alives included) is passed on.

    Once it answers an AppError, that event is not sent: `stream` is closed first (its own clean-up runs, as
    when the client hangs up: a turn stored interrupted, a run cancelled, the upstream request closed), then
    `end(error)` is sent and the response ends. A cancellation (the client hung up) closes `stream` too.
    """
    failed = None
    async with aclosing(stream):
        async for event in stream:
            failed = await problem()
            if failed is not None:
                break
            yield event
    if failed is not None:
        yield end(failed)


def sse_response(stream: AsyncGenerator[bytes, None]) -> StreamingHttpResponse:
    """A streaming response that proxies (X-Accel-Buffering) and caches leave alone. Each event reaches the
    socket as it is sent (under daphne, agentsite.server.asgi_limits flushes every streamed chunk)."""
    response = StreamingHttpResponse(_counted(stream) if metrics.ENABLED else stream,
                                     content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


@dataclass(frozen=True)
class _Failed:
    error: BaseException


_END = object()  # the source is exhausted
_QUIET = object()  # `interval` seconds passed with no event: the consumer yields None

# A timer set for `when` may run a little early (the loop rounds to its clock's resolution): due within this.
_EARLY_S = 0.001


async def with_keepalive(events: AsyncGenerator[T, None], interval: float) -> AsyncGenerator[T | None, None]:
    """`events`, with None whenever `interval` seconds pass without one (the caller sends a keep-alive).

    The events are pulled by a task of their own, so a keep-alive never interrupts the producer. When this
    generator is cancelled or closed, that task is cancelled and awaited: the producer's own clean-up (a
    turn stored as interrupted, an upstream request closed) has finished when this one's has. An exception
    the producer raises is raised here. The quiet spells are timed by one timer that runs at most once an
    interval (_Quiet), not a timeout set and cancelled around every event.
    """
    queue: asyncio.Queue[Any] = asyncio.Queue()
    pump = asyncio.create_task(_pump(events, queue))
    quiet = _Quiet(queue, interval)
    try:
        while True:
            item = await queue.get()
            if item is _QUIET:
                quiet.taken()
                yield None
                continue
            quiet.last = quiet.loop.time()
            if item is _END:
                return
            if type(item) is _Failed:
                raise item.error
            yield item
    finally:
        quiet.stop()
        if not pump.done():
            pump.cancel()
        # asyncio.wait never swallows a cancellation of this task: a second hang-up signal still ends it,
        # and the pump then finishes its clean-up on its own.
        await asyncio.wait({pump})


async def _pump(events: AsyncGenerator[T, None], queue: asyncio.Queue[Any]) -> None:
    """Each event into the queue as it is (_END, _QUIET and a _Failed are this module's own and never an
    event), then _END."""
    try:
        async for event in events:
            queue.put_nowait(event)
    except asyncio.CancelledError:
        raise
    except BaseException as exc:  # handed to the consumer, which raises it in its own task
        queue.put_nowait(_Failed(exc))
    finally:
        queue.put_nowait(_END)


class _Quiet:
    """Puts _QUIET into the queue once `interval` seconds have passed since the consumer last took something.

    Invariants: one timer handle at a time; at most one _QUIET waits in the queue (a consumer held up by a
    slow client gets one keep-alive, not one per interval missed); `last` is the loop time the consumer last
    took an event or a _QUIET, which the consumer sets with a plain assignment, so an event costs no timer.
    """

    def __init__(self, queue: asyncio.Queue[Any], interval: float) -> None:
        self.loop = asyncio.get_running_loop()
        self.queue, self.interval = queue, interval
        self.last = self.loop.time()
        self.waiting = False
        self.handle = self.loop.call_at(self.last + interval, self._due)

    def taken(self) -> None:
        self.waiting = False
        self.last = self.loop.time()

    def _due(self) -> None:
        now = self.loop.time()
        if not self.waiting and now >= self.last + self.interval - _EARLY_S:
            self.waiting = True
            self.queue.put_nowait(_QUIET)
            self.handle = self.loop.call_at(now + self.interval, self._due)
        else:  # an event came meanwhile (or a _QUIET is still waiting): due an interval after it was taken
            self.handle = self.loop.call_at(max(now, self.last) + self.interval, self._due)

    def stop(self) -> None:
        self.handle.cancel()


# --- the same rule for an ASGI app's event streams (/mcp) ------------------------------------------

AsgiMessage = dict[str, Any]


async def _counted(stream: AsyncGenerator[bytes, None]) -> AsyncGenerator[bytes, None]:
    """The stream, counted in agentsite_sse_streams_open from its first event to its end (however it ends)."""
    metrics.sse_stream_opened(1)
    try:
        async with aclosing(stream):
            async for chunk in stream:
                yield chunk
    finally:
        metrics.sse_stream_opened(-1)


class SseGuard:
    """An ASGI request's `send` and `receive`, for an app that streams events itself (the MCP transports).

    While the response is `text/event-stream`, `problem()` is awaited before each body chunk (one event) is
    sent. Once it answers an AppError, `end(error, chunk)` is sent instead of that chunk, the body ends, and
    `receive` reports `http.disconnect` from then on, so the app stops as it does when a client hangs up;
    whatever it still sends is dropped. Other responses pass untouched.
    """

    def __init__(self, send: Callable[[AsgiMessage], Awaitable[None]], receive: Callable[[], Awaitable[AsgiMessage]],
                 problem: Problem, end: Callable[[AppError, bytes], bytes]) -> None:
        self._send, self._receive = send, receive
        self._problem, self._end = problem, end
        self._streaming = False
        self._ended = asyncio.Event()

    async def send(self, message: AsgiMessage) -> None:
        if self._ended.is_set():
            return
        if message["type"] == "http.response.start":
            self._streaming = any(name.lower() == b"content-type" and value.startswith(b"text/event-stream")
                                  for name, value in message.get("headers", []))
        elif self._streaming and message["type"] == "http.response.body" and message.get("body"):
            failed = await self._problem()
            if failed is not None:
                self._ended.set()
                await self._send({"type": "http.response.body", "body": self._end(failed, message["body"]),
                                  "more_body": False})
                return
        await self._send(message)

    async def receive(self) -> AsgiMessage:
        if self._ended.is_set():
            return {"type": "http.disconnect"}
        received = asyncio.ensure_future(self._receive())
        ended = asyncio.ensure_future(self._ended.wait())
        try:
            await asyncio.wait({received, ended}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (received, ended):
                if not task.done():
                    task.cancel()  # a queue's get, which a cancellation leaves unconsumed
        return received.result() if received.done() and not received.cancelled() else {"type": "http.disconnect"}

"""The rule every stream follows when its credential dies (agentsite.core.sse): `ended_when` asks before each event and,
once told no, closes the stream (its clean-up done) before it sends the one error event; `SseGuard` does the same
for an ASGI app's event stream, then reports a disconnect so the app stops, and leaves other responses alone."""

from __future__ import annotations

import asyncio
import json

from agentsite.core.errors import AppError
from agentsite.core.sse import SseGuard, ended_when, error_event

REVOKED = AppError("token_invalid", "The token was revoked (logged out); log in again.", 401)


class Verdicts:
    """problem(): None for the first `good` calls, then REVOKED; counts the calls."""

    def __init__(self, good: int) -> None:
        self.good, self.calls = good, 0

    async def __call__(self) -> AppError | None:
        self.calls += 1
        return None if self.calls <= self.good else REVOKED


async def test_events_pass_while_the_credential_stands_and_the_next_one_becomes_the_error():
    log: list[str] = []

    async def events():
        try:
            for index in range(5):
                log.append(f"made {index}")
                yield f"event {index}".encode()
        finally:
            log.append("closed")

    sent = [chunk async for chunk in ended_when(events(), Verdicts(good=2))]
    assert sent == [b"event 0", b"event 1", error_event(REVOKED)]
    # The third event was made but never sent; the stream was closed before the error went out.
    assert log == ["made 0", "made 1", "made 2", "closed"]
    assert error_event(REVOKED) == b'event: error\ndata: {"code": "token_invalid", "message": "' + \
        REVOKED.message.encode() + b'"}\n\n'


async def test_a_stream_that_ends_first_ends_as_it_would_with_no_error():
    async def events():
        yield b"only"

    verdicts = Verdicts(good=10)
    assert [chunk async for chunk in ended_when(events(), verdicts)] == [b"only"]
    assert verdicts.calls == 1


async def test_a_hang_up_closes_the_wrapped_stream():
    closed = asyncio.Event()

    async def events():
        try:
            yield b"first"
            await asyncio.Event().wait()  # an upstream that never answers
            yield b"never"
        finally:
            closed.set()

    wrapped = ended_when(events(), Verdicts(good=10))
    received = asyncio.Event()

    async def consume():
        async for _ in wrapped:
            received.set()

    task = asyncio.create_task(consume())
    async with asyncio.timeout(5):
        await received.wait()
    task.cancel()  # what Django does when the client hangs up
    await asyncio.wait({task})
    assert closed.is_set()


def _start(content_type: bytes) -> dict:
    return {"type": "http.response.start", "status": 200, "headers": [(b"content-type", content_type)]}


def _body(data: bytes, more: bool = True) -> dict:
    return {"type": "http.response.body", "body": data, "more_body": more}


async def _guarded(good: int, content_type: bytes, messages: list[dict]) -> tuple[list[dict], SseGuard]:
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    async def receive() -> dict:
        await asyncio.Event().wait()  # the client stays
        return {}

    guard = SseGuard(send, receive, Verdicts(good), lambda exc, replaced: b"END " + replaced)
    for message in messages:
        await guard.send(message)
    return sent, guard


async def test_an_event_stream_ends_with_the_replacement_event_and_then_reads_as_a_hang_up():
    events = [_start(b"text/event-stream"), _body(b"one"), _body(b"two"), _body(b"three")]
    sent, guard = await _guarded(1, b"text/event-stream", events)
    assert sent == [events[0], events[1], {"type": "http.response.body", "body": b"END two", "more_body": False}]
    async with asyncio.timeout(5):
        assert await guard.receive() == {"type": "http.disconnect"}


async def test_a_receive_waiting_when_the_stream_ends_returns_a_disconnect():
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    async def receive() -> dict:
        await asyncio.Event().wait()
        return {}

    guard = SseGuard(send, receive, Verdicts(0), lambda exc, replaced: json.dumps(exc.code).encode())
    waiting = asyncio.create_task(guard.receive())
    await guard.send(_start(b"text/event-stream"))
    await guard.send(_body(b"data: {}\n\n"))
    async with asyncio.timeout(5):
        assert await waiting == {"type": "http.disconnect"}
    assert sent[-1]["body"] == b'"token_invalid"' and sent[-1]["more_body"] is False


async def test_other_responses_pass_untouched():
    events = [_start(b"application/json"), _body(b'{"a": 1}', more=False)]
    sent, _ = await _guarded(0, b"application/json", events)
    assert sent == events

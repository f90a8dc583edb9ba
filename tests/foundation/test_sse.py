"""Server-sent event framing and the keep-alive wrapper every stream uses (agentsite.core.sse)."""

from __future__ import annotations

import asyncio
import time

import pytest

from agentsite.core.sse import KEEPALIVE, sse_event, with_keepalive


def test_a_named_event_is_framed_as_event_and_data_lines():
    assert sse_event({"content": "héllo"}, "delta") == b'event: delta\ndata: {"content": "h\\u00e9llo"}\n\n'


def test_an_unnamed_event_is_a_data_line_and_a_string_goes_as_is():
    assert sse_event("[DONE]") == b"data: [DONE]\n\n"
    assert sse_event({"a": 1}) == b'data: {"a": 1}\n\n'


def test_a_lone_surrogate_from_a_model_still_encodes():
    assert sse_event({"content": "\ud800"}, "delta") == b'event: delta\ndata: {"content": "\\ud800"}\n\n'


def test_the_keepalive_is_a_comment():
    assert KEEPALIVE == b": keep-alive\n\n"


async def _source(queue: asyncio.Queue):
    while True:
        item = await queue.get()
        if item is None:
            return
        yield item


async def test_keepalive_gaps_are_filled_with_none_while_the_source_is_silent():
    queue: asyncio.Queue = asyncio.Queue()
    stream = with_keepalive(_source(queue), 0.02)
    assert await anext(stream) is None  # nothing within 20 ms
    queue.put_nowait("a")
    seen = [await anext(stream)]
    while seen[-1] is None:
        seen.append(await anext(stream))
    queue.put_nowait(None)
    assert seen[-1] == "a"
    with pytest.raises(StopAsyncIteration):
        while True:
            assert await anext(stream) is None


async def test_a_consumer_held_up_gets_one_keepalive_not_one_for_each_interval_it_missed():
    queue: asyncio.Queue = asyncio.Queue()
    stream = with_keepalive(_source(queue), 0.01)
    assert await anext(stream) is None
    await asyncio.sleep(0.15)  # fifteen intervals without reading, as while a slow client's socket is full
    queue.put_nowait("a")
    assert await anext(stream) is None  # the one keep-alive that waited
    assert await anext(stream) == "a"
    queue.put_nowait(None)
    with pytest.raises(StopAsyncIteration):
        await anext(stream)


async def test_no_keepalive_while_events_come_more_often_than_the_interval():
    async def steady():
        for index in range(100):
            await asyncio.sleep(0.01)
            yield index

    # A second or more: five intervals and more, each with events in it. A keep-alive is right only after a
    # real gap of an interval (a loaded machine may stall this process that long), never between events.
    interval, taken, last = 0.2, [], time.monotonic()
    async for item in with_keepalive(steady(), interval):
        now = time.monotonic()
        taken.append((item, now - last))
        last = now
    assert [item for item, _gap in taken if item is not None] == list(range(100))
    assert all(gap >= interval * 0.9 for item, gap in taken if item is None), taken


async def test_an_error_of_the_source_is_raised_to_the_consumer():
    async def failing():
        yield 1
        raise ValueError("broken upstream")

    stream = with_keepalive(failing(), 5)
    assert await anext(stream) == 1
    with pytest.raises(ValueError, match="broken upstream"):
        await anext(stream)


async def test_a_cancellation_is_never_swallowed_when_an_event_arrives_in_the_same_step():
    # The Python 3.11 asyncio.wait_for trap (docs/notes.md): an item that becomes ready in the same loop step
    # as the consumer's cancellation used to win, and the hang-up was lost. Every step offset is tried.
    lost = []
    for steps in range(12):
        for order in ("put-first", "cancel-first"):
            queue: asyncio.Queue = asyncio.Queue()
            closed = asyncio.Event()

            async def source(queue: asyncio.Queue = queue, closed: asyncio.Event = closed):
                try:
                    async for item in _source(queue):
                        yield item
                finally:
                    closed.set()

            async def consume(source=source):
                async for _ in with_keepalive(source(), 5):
                    pass

            consumer = asyncio.create_task(consume())
            for _ in range(3):
                await asyncio.sleep(0)
            if order == "put-first":
                queue.put_nowait("x")
            for _ in range(steps):
                await asyncio.sleep(0)
            consumer.cancel()
            if order == "cancel-first":
                queue.put_nowait("x")
            await asyncio.wait({consumer}, timeout=1)
            if not consumer.cancelled():
                lost.append((steps, order))
                consumer.cancel()  # a second cancellation, so that the test itself ends
                await asyncio.wait({consumer}, timeout=1)
            else:
                assert closed.is_set(), "the source must be closed when the consumer is cancelled"
    assert not lost, f"cancellations swallowed at (steps, order): {lost}"


async def test_the_sources_clean_up_has_finished_when_the_cancelled_consumer_ends():
    cleaned, first_read = [], asyncio.Event()

    async def source():
        try:
            yield 1
            await asyncio.Event().wait()
            yield 2
        finally:
            for _ in range(3):  # an awaited clean-up, like storing an interrupted reply, over several steps
                await asyncio.sleep(0)
            cleaned.append(True)

    async def consume():
        async for _ in with_keepalive(source(), 5):
            first_read.set()

    consumer = asyncio.create_task(consume())
    async with asyncio.timeout(5):
        await first_read.wait()  # the consumer is inside the stream, waiting on the source
    consumer.cancel()
    await asyncio.wait({consumer})
    assert consumer.cancelled() and cleaned == [True]

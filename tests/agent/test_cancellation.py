"""Cancelling the task that consumes a stream closes the upstream request at once."""

from __future__ import annotations

import asyncio

from agentsite.agent.loop import run_agent
from agentsite.agent.providers import get_provider
from agentsite.agent.types import ChatRequest, Message
from tests.fakes.llm import Hang, Text

REQUEST = ChatRequest([Message("user", "Tell me a long story.")])
# A hang-up counts only while the upstream is still answering: the story outlasts the deadline (more than 20 s
# of deltas), so a hang-up seen within it was the client's, however loaded the machine.
HANGUP_DEADLINE_S = 5.0
LONG_STORY = Text("once upon a time " * 400, delay=0.05)


async def consume_until_first(stream, first: asyncio.Event, seen: list) -> None:
    async for event in stream:
        seen.append(event)
        first.set()


async def cancel_after_first_event(stream) -> list:
    first = asyncio.Event()
    seen: list = []
    task = asyncio.create_task(consume_until_first(stream, first, seen))
    await asyncio.wait_for(first.wait(), 5)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled(), "the consumer should have ended by cancellation"
    return seen


async def test_cancelling_a_provider_stream_hangs_up_on_the_upstream(upstream):
    fake, settings = upstream
    fake.script(LONG_STORY)

    seen = await cancel_after_first_event(get_provider(settings).stream(REQUEST))

    await fake.wait_for_hangups(1, timeout=HANGUP_DEADLINE_S)
    assert len(seen) < 10


async def test_cancelling_a_provider_stream_that_is_waiting_for_a_byte_hangs_up(upstream):
    fake, settings = upstream
    fake.script(Hang(text="the start"))

    await cancel_after_first_event(get_provider(settings).stream(REQUEST))

    await fake.wait_for_hangups(1, timeout=HANGUP_DEADLINE_S)


async def test_cancelling_a_non_streaming_call_hangs_up_on_the_upstream(upstream):
    fake, settings = upstream
    fake.script(Hang())
    task = asyncio.create_task(get_provider(settings).complete(REQUEST))
    deadline = asyncio.get_running_loop().time() + 5
    while not fake.requests:
        assert asyncio.get_running_loop().time() < deadline, "the request never reached the fake upstream"
        await asyncio.sleep(0.005)

    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

    await fake.wait_for_hangups(1, timeout=HANGUP_DEADLINE_S)


async def test_cancelling_the_agent_loop_hangs_up_on_the_upstream(upstream):
    fake, settings = upstream
    fake.script(LONG_STORY)

    seen = await cancel_after_first_event(run_agent(messages=[Message("user", "A story?")], user_id=None,
                                                    settings=settings, use_tools=False))

    await fake.wait_for_hangups(1, timeout=HANGUP_DEADLINE_S)
    assert seen[0].type == "delta"
    assert seen[-1].partial.startswith("once upon")


async def test_closing_a_provider_stream_early_hangs_up_on_the_upstream(upstream):
    fake, settings = upstream
    fake.script(LONG_STORY)
    stream = get_provider(settings).stream(REQUEST)

    first = await anext(stream)
    await stream.aclose()

    assert first.text == "once upon "
    await fake.wait_for_hangups(1, timeout=HANGUP_DEADLINE_S)


async def test_closing_the_agent_stream_early_hangs_up_on_the_upstream(upstream):
    fake, settings = upstream
    fake.script(LONG_STORY)
    stream = run_agent(messages=[Message("user", "A story?")], user_id=None, settings=settings, use_tools=False)

    first = await anext(stream)
    await stream.aclose()

    assert first.type == "delta"
    await fake.wait_for_hangups(1, timeout=HANGUP_DEADLINE_S)

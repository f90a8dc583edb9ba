"""The agent-turn service (sessions_app.turns) without HTTP, as the chat view and the scheduler use it."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from agentsite.core.errors import AppError
from sessions_app.models import ChatMessage
from sessions_app.services import session_create
from sessions_app.turns import turn_start
from tests.fakes.llm import Call, Hang, StreamError, Text, ToolCalls

pytestmark = pytest.mark.django_db(transaction=True)


def upstream(fake_openai) -> dict:
    return {"provider": "openai", "base_url": fake_openai.base_url, "api_key": "sk-x", "model": "m",
            "request_timeout": 5.0, "kb_enabled": False}


async def stored(session) -> list[tuple[str, str, str]]:
    rows = await sync_to_async(list)(ChatMessage.objects.filter(session=session).order_by("seq"))
    return [(row.role, row.content, row.status) for row in rows]


async def test_a_turn_stores_the_user_message_before_any_event_and_the_reply_complete(owner, fake_openai):
    session = await sync_to_async(session_create)(owner=owner, name="t")
    fake_openai.script(Text("Hello there.", usage=(4, 2)))

    turn = await turn_start(owner=owner, session_id=session.pk, message="hi", overrides=upstream(fake_openai))
    # The reply exists from the start, `streaming`: a crash before the end leaves it, not nothing.
    assert await stored(session) == [("user", "hi", "complete"), ("assistant", "", "streaming")]
    events = [event async for event in turn.events()]

    assert [event.type for event in events][0] == "start" and events[-1].type == "done"
    assert events[-1].data["message_id"] == str(turn.reply_id) == events[0].data["message_id"]
    assert events[-1].data["usage"] == {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
    assert turn.status == "complete" and turn.transcript.text == "Hello there."
    assert await stored(session) == [("user", "hi", "complete"), ("assistant", "Hello there.", "complete")]
    reply = await sync_to_async(ChatMessage.objects.get)(pk=turn.reply_id)
    assert reply.usage == {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
    assert reply.finish_reason == "stop"


async def _started_on_a_hanging_upstream(owner, fake_openai):
    """A session, its turn on "story" against an upstream that sends "partial " and hangs, and the turn's events
    with `start` read."""
    session = await sync_to_async(session_create)(owner=owner)
    fake_openai.script(Hang(text="partial "))
    turn = await turn_start(owner=owner, session_id=session.pk, message="story", overrides=upstream(fake_openai))
    events = turn.events()
    assert (await anext(events)).type == "start"
    return session, turn, events


async def test_a_turn_closed_mid_reply_is_stored_interrupted_and_hangs_up_on_the_upstream(owner, fake_openai):
    session, turn, events = await _started_on_a_hanging_upstream(owner, fake_openai)
    assert (await anext(events)).data == {"content": "partial "}

    await events.aclose()

    await fake_openai.wait_for_hangups(1, timeout=2)
    assert turn.status == "interrupted"
    assert (await stored(session))[-1] == ("assistant", "partial ", "interrupted")


async def test_an_upstream_failure_mid_stream_is_stored_as_error_with_what_streamed(owner, fake_openai):
    session = await sync_to_async(session_create)(owner=owner)
    fake_openai.script(StreamError(text="Half ", message="Overloaded."))
    turn = await turn_start(owner=owner, session_id=session.pk, message="go", overrides=upstream(fake_openai))
    events = [event async for event in turn.events()]

    assert events[-1].type == "error" and events[-1].data["code"] == "upstream_error"
    assert (await stored(session))[-1] == ("assistant", "Half ", "error")


async def test_a_tool_round_is_stored_on_the_reply_with_each_result(owner, fake_openai, fake_web, settings):
    settings.AGENTSITE_ALLOW_PRIVATE_FETCH = True
    fake_web.page("/p", "<html><body><p>The answer is forty-two.</p></body></html>")
    session = await sync_to_async(session_create)(owner=owner)
    fake_openai.script(ToolCalls([Call("web_fetch", {"url": fake_web.url("/p")}, id="c1")], text="Looking."),
                       Text("Forty-two."))
    turn = await turn_start(owner=owner, session_id=session.pk, message="?", overrides=upstream(fake_openai))
    [event async for event in turn.events()]

    reply = await sync_to_async(ChatMessage.objects.get)(pk=turn.reply_id)
    assert reply.content == "Looking.\n\nForty-two."
    assert [(call["id"], call["name"], call["result"]["is_error"]) for call in reply.tool_calls] == [
        ("c1", "web_fetch", False)]
    assert "forty-two" in reply.tool_calls[0]["result"]["content"]


async def test_a_turn_in_another_users_session_is_not_found_and_stores_nothing(owner, other_user):
    session = await sync_to_async(session_create)(owner=other_user)
    with pytest.raises(AppError) as caught:
        await turn_start(owner=owner, session_id=session.pk, message="hi")
    assert caught.value.status == 404
    assert await stored(session) == []


async def test_a_message_over_the_limit_is_refused_before_anything_is_stored(owner):
    session = await sync_to_async(session_create)(owner=owner)
    with pytest.raises(AppError) as caught:
        await turn_start(owner=owner, session_id=session.pk, message="x" * 32_001)
    assert (caught.value.status, caught.value.code) == (400, "message_too_long")
    assert await stored(session) == []


async def test_the_offline_default_answers_a_turn_with_no_network(owner):
    session = await sync_to_async(session_create)(owner=owner, name="t")  # named: the turn ends at done
    turn = await turn_start(owner=owner, session_id=session.pk, message="ping")
    events = [event async for event in turn.events()]
    assert events[-1].type == "done" and "ping" in events[-1].data["content"]
    assert (await stored(session))[-1][2] == "complete"


async def test_a_streaming_reply_is_checkpointed_and_a_dead_process_leaves_it_interrupted(owner, fake_openai,
                                                                                         monkeypatch):
    """What a crash leaves: the reply as of its last checkpoint, `interrupted` once the process is swept."""
    import asyncio

    from agentsite.core import processes
    from sessions_app import turns

    monkeypatch.setattr(turns, "CHECKPOINT_S", 0.0)
    session = await sync_to_async(session_create)(owner=owner)
    fake_openai.script(Hang(text="Once upon "))
    turn = await turn_start(owner=owner, session_id=session.pk, message="story", overrides=upstream(fake_openai))
    events = turn.events()
    assert (await anext(events)).type == "start"
    assert (await anext(events)).data == {"content": "Once upon "}
    for _ in range(100):  # the checkpoint is written in the background
        if (await stored(session))[-1] == ("assistant", "Once upon ", "streaming"):
            break
        await asyncio.sleep(0.02)
    assert (await stored(session))[-1] == ("assistant", "Once upon ", "streaming")
    # Checkpoints go on while the upstream is silent (every CHECKPOINT_S): none during the rest of the test,
    # which plays a sweep that took this live process for dead.
    monkeypatch.setattr(turns, "CHECKPOINT_S", 60.0)
    await asyncio.sleep(0.2)

    # The process dies (simulated: the sweep is told it is dead); the reply keeps its checkpoint.
    me = await sync_to_async(processes.current_process_id)()
    marked = await sync_to_async(processes._sweepers["streaming replies"])([me], False)
    assert marked == 1 and (await stored(session))[-1] == ("assistant", "Once upon ", "interrupted")
    await events.aclose()  # this test's turn is not really dead: its own final store keeps the sweep's
    assert (await stored(session))[-1] == ("assistant", "Once upon ", "interrupted")


async def test_another_turn_still_streaming_is_not_in_the_history(owner, fake_openai):
    session = await sync_to_async(session_create)(owner=owner)
    fake_openai.script(Hang(text="Thinking "))
    first = await turn_start(owner=owner, session_id=session.pk, message="one", overrides=upstream(fake_openai))
    first_events = first.events()
    await anext(first_events)
    await anext(first_events)
    fake_openai.script(Text("Two."))
    second = await turn_start(owner=owner, session_id=session.pk, message="two", overrides=upstream(fake_openai))
    assert [message.role for message in second.messages] == ["user"]  # both user messages, merged
    [event async for event in second.events()]
    await first_events.aclose()


async def test_a_turn_closed_right_after_start_leaves_the_reply_interrupted_not_streaming(owner, fake_openai):
    session, turn, events = await _started_on_a_hanging_upstream(owner, fake_openai)
    await events.aclose()  # the client hung up before any of the reply

    assert turn.status == "interrupted"
    assert await stored(session) == [("user", "story", "complete"), ("assistant", "", "interrupted")]


async def test_a_turn_asks_its_context_and_tools_in_its_own_database_call_and_the_run_uses_them(
        owner, fake_openai, monkeypatch):
    """No crossing to a database thread between the turn's start and its request to the model: the context
    sources and the tool listing were asked in turn_start's database call (agentsite.agent.loop.prepare_now)."""
    from agentsite.agent import loop
    from agentsite.agent.tools import ToolContext, registry

    session = await sync_to_async(session_create)(owner=owner, name="t")  # named: the turn ends at done
    fake_openai.script(Text("Done."))
    turn = await turn_start(owner=owner, session_id=session.pk, message="hi", overrides=upstream(fake_openai))
    listed = await registry.list_tools(ToolContext(owner.pk, False), turn.settings)
    assert turn.prepared is not None
    assert [tool.name for tool in turn.prepared.tools] == [tool.name for tool in listed] != []

    async def not_asked(*args, **kwargs):
        raise AssertionError("the run asked again what the turn had prepared")

    monkeypatch.setattr(loop._AgentRun, "_tools", not_asked)
    monkeypatch.setattr(loop._AgentRun, "_conversation", not_asked)
    events = [event async for event in turn.events()]
    assert events[-1].type == "done"
    sent = [tool.get("function", tool)["name"] for tool in fake_openai.bodies()[0]["tools"]]
    assert sent == [tool.name for tool in listed]


async def test_a_tool_source_that_can_only_list_asynchronously_is_asked_by_the_run(owner, fake_openai):
    from agentsite.agent.tools import ToolSource, registry
    from tests.agent.conftest import text_tool

    async def echo(arguments, ctx) -> str:
        return "echo"

    class Remote(ToolSource):  # no list_tools_now: as an MCP server to connect
        name = "remote-test"

        async def list_tools(self, ctx):
            return [text_tool("remote_echo", echo, {"type": "object", "properties": {}})]

    registry.register_source(Remote())
    try:
        session = await sync_to_async(session_create)(owner=owner, name="t")  # named: the turn ends at done
        fake_openai.script(Text("Done."))
        turn = await turn_start(owner=owner, session_id=session.pk, message="hi", overrides=upstream(fake_openai))
        assert turn.prepared is None
        events = [event async for event in turn.events()]
    finally:
        registry.unregister_source("remote-test")
    assert events[-1].type == "done"
    assert "remote_echo" in [tool.get("function", tool)["name"] for tool in fake_openai.bodies()[0]["tools"]]


async def _reply_settled(reply_id) -> ChatMessage:
    """The reply once it is no longer `streaming` (polled, 5 s)."""
    import asyncio
    import time

    deadline = time.monotonic() + 5
    while True:
        reply = await sync_to_async(ChatMessage.objects.get)(pk=reply_id)
        if reply.status != "streaming":
            return reply
        if time.monotonic() > deadline:
            raise AssertionError("within 5 s: the reply left `streaming` (its turn was dropped, not finished)")
        await asyncio.sleep(0.02)


async def test_a_turn_cancelled_while_its_opening_write_is_in_flight_leaves_the_reply_interrupted(owner, monkeypatch):
    """A client that hangs up while turn_start's database call runs: the write lands on its thread after the
    caller has gone, and the reply it stored must still end, `interrupted` and empty, in this live process."""
    import asyncio
    import threading

    from sessions_app import services

    written, release = threading.Event(), threading.Event()
    store = services.turn_messages_store

    def store_then_hold(**kwargs):
        store(**kwargs)
        written.set()
        assert release.wait(5), "the test never let the opening write return"

    monkeypatch.setattr(services, "turn_messages_store", store_then_hold)
    session = await sync_to_async(session_create)(owner=owner)
    opening = asyncio.create_task(turn_start(owner=owner, session_id=session.pk, message="hi"))
    assert await asyncio.to_thread(written.wait, 5), "the opening write never ran"

    opening.cancel()  # the hang-up, with the write done in its thread and its call not yet returned
    with pytest.raises(asyncio.CancelledError):
        await opening
    release.set()

    reply_id = await sync_to_async(ChatMessage.objects.values_list("pk", flat=True).get)(session=session,
                                                                                       role="assistant")
    reply = await _reply_settled(reply_id)
    assert (reply.status, reply.content, reply.finish_reason) == ("interrupted", "", "interrupted")
    assert reply.process == ""  # final: no later write of this process may change it
    assert await stored(session) == [("user", "hi", "complete"), ("assistant", "", "interrupted")]


async def test_a_turn_whose_task_ends_without_running_it_leaves_the_reply_interrupted(owner):
    """turn_start returned, but the task that started the turn ended before running it (a hang-up between the
    opening write and the stream's first step): the reply is still finished, as `interrupted`."""
    import asyncio

    session = await sync_to_async(session_create)(owner=owner)

    async def start_and_drop():
        return (await turn_start(owner=owner, session_id=session.pk, message="hi")).reply_id

    reply = await _reply_settled(await asyncio.create_task(start_and_drop()))
    assert (reply.status, reply.content, reply.finish_reason) == ("interrupted", "", "interrupted")
    assert await stored(session) == [("user", "hi", "complete"), ("assistant", "", "interrupted")]


async def test_a_turn_run_by_another_task_than_the_one_that_started_it_is_stored_once_complete(owner, fake_openai):
    """The chat stream runs the turn in a task of its own (sse.with_keepalive): the task that started it
    waiting meanwhile does not make it abandoned."""
    import asyncio

    session = await sync_to_async(session_create)(owner=owner, name="t")  # named: the turn ends at done
    fake_openai.script(Text("Hello."))
    turn = await turn_start(owner=owner, session_id=session.pk, message="hi", overrides=upstream(fake_openai))

    async def run():
        return [event.type async for event in turn.events()]

    assert (await asyncio.create_task(run()))[-1] == "done"
    assert await stored(session) == [("user", "hi", "complete"), ("assistant", "Hello.", "complete")]

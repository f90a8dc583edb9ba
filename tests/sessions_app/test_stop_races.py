"""Stopping a turn (sessions_app.turns, sessions_app.stops) without HTTP: at each moment a stop can land, and
racing what else can end a turn (a hang-up, the final store, a consumer's own work between events)."""

from __future__ import annotations

import asyncio
import math
import threading
import time

import pytest
from asgiref.sync import sync_to_async

from catalogue.services import config_update
from scheduler import services as scheduling
from scheduler.models import ScheduledTask
from sessions_app import services, stops, turns
from sessions_app.models import ChatMessage
from sessions_app.services import session_create
from sessions_app.turns import turn_start
from tests.fakes.http import FakeResponse
from tests.fakes.llm import Call, Hang, Text, ToolCalls
from tests.scheduler.test_runner import T0
from tests.sessions_app.test_turns import upstream

pytestmark = pytest.mark.django_db(transaction=True)


async def _reply(turn) -> ChatMessage:
    return await sync_to_async(ChatMessage.objects.get)(pk=turn.reply_id)


async def _stop_requested(turn) -> None:
    """What POST .../stop does, without its wait: the reply marked `stopped`, the announcement handled here."""
    message = await _reply(turn)
    assert await sync_to_async(services.message_stop)(message=message)
    stops._on_stop(str(turn.reply_id))


async def _rest(events) -> list:
    return [event async for event in events]


async def _turn(owner, fake_openai, *replies):
    session = await sync_to_async(session_create)(owner=owner, name="races")
    fake_openai.script(*replies)
    turn = await turn_start(owner=owner, session_id=session.pk, message="go", overrides=upstream(fake_openai))
    events = turn.events()
    assert (await anext(events)).type == "start"
    return turn, events


async def test_a_stop_before_the_first_token_ends_the_turn_stopped_and_empty(owner, fake_openai):
    turn, events = await _turn(owner, fake_openai, Hang())
    pending = asyncio.ensure_future(anext(events))  # the run asks the upstream, which sends nothing
    for _ in range(250):
        if fake_openai.requests:
            break
        await asyncio.sleep(0.02)
    assert len(fake_openai.requests) == 1 and not pending.done()

    await _stop_requested(turn)
    rest = [await asyncio.wait_for(pending, 5), *await asyncio.wait_for(_rest(events), 5)]

    assert [event.type for event in rest] == ["done"]
    assert rest[0].data["status"] == "stopped" and rest[0].data["content"] == "" and rest[0].data["ttft_ms"] is None
    reply = await _reply(turn)
    assert (reply.status, reply.content, reply.finish_reason, reply.process) == ("stopped", "", "stopped", "")
    await fake_openai.wait_for_hangups(1, timeout=2)  # the upstream request is closed too


async def test_a_stop_while_a_tool_runs_ends_the_turn_with_the_call_unfinished(owner, fake_openai, fake_web, settings):
    settings.AGENTSITE_ALLOW_PRIVATE_FETCH = True
    fake_web.route("/slow", FakeResponse.text("<p>never</p>", content_type="text/html", delay=math.inf))
    turn, events = await _turn(owner, fake_openai, ToolCalls([Call("web_fetch", {"url": fake_web.url("/slow")},
                                                                   id="c1")], text="Fetching."))
    seen = []
    async for event in events:
        seen.append(event.type)
        if event.type == "tool_call":
            break
    await asyncio.sleep(0.2)  # the fetch is waiting on the page

    await _stop_requested(turn)
    rest = await asyncio.wait_for(_rest(events), 5)

    assert [event.type for event in rest] == ["done"] and rest[0].data["status"] == "stopped"
    assert [(step["name"], step["result"]) for step in rest[0].data["steps"]] == [("web_fetch", None)]
    reply = await _reply(turn)
    assert (reply.status, reply.content) == ("stopped", "Fetching.")
    assert [(call["id"], call["result"]) for call in reply.tool_calls] == [("c1", None)]


async def test_a_hang_up_racing_a_stop_leaves_the_reply_stopped(owner, fake_openai):
    turn, events = await _turn(owner, fake_openai, Hang("Half a "))
    assert (await anext(events)).type == "delta"
    consumer = asyncio.create_task(_rest(events))  # the stream's pump: the turn now belongs to it
    await asyncio.sleep(0.05)

    await _stop_requested(turn)
    consumer.cancel()  # the client hangs up in the same moment: two cancellations, the stop's and its own
    with pytest.raises(asyncio.CancelledError):
        await consumer

    reply = await _reply(turn)
    assert (reply.status, reply.content, reply.process) == ("stopped", "Half a ", "")


async def test_a_hang_up_before_the_stops_announcement_arrives_leaves_the_reply_stopped(owner, fake_openai):
    """The reply was marked stopped, but the turn never heard of it (the announcement is late or lost) when its
    client hangs up: its final `interrupted` store keeps the stop (and saves the text, clears `process`)."""
    turn, events = await _turn(owner, fake_openai, Hang("Half a "))
    assert (await anext(events)).type == "delta"
    message = await _reply(turn)
    assert await sync_to_async(services.message_stop)(message=message)

    await events.aclose()

    reply = await _reply(turn)
    assert (reply.status, reply.finish_reason, reply.content, reply.process) == ("stopped", "stopped", "Half a ", "")


async def test_a_stop_landing_during_the_final_store_changes_nothing(owner, fake_openai, monkeypatch):
    """The turn has its whole answer and is storing it when the stop arrives: it stays complete, in the stream
    and in the database, whole (the stop request, which waits for the final store, answers it so)."""
    turn, events = await _turn(owner, fake_openai, Text("All of it."))
    finish = services.message_finish_reply
    storing = asyncio.Event()
    loop = asyncio.get_running_loop()

    def slow_finish(**fields):
        loop.call_soon_threadsafe(storing.set)
        time.sleep(0.3)
        return finish(**fields)

    monkeypatch.setattr(services, "message_finish_reply", slow_finish)
    consumer = asyncio.create_task(_rest(events))
    await asyncio.wait_for(storing.wait(), 5)
    # The stop request marks the row (still `streaming`: the final write is on its way) and announces it.
    assert await sync_to_async(services.message_stop)(message=await _reply(turn))
    stops._on_stop(str(turn.reply_id))

    rest = await asyncio.wait_for(consumer, 5)
    assert rest[-1].type == "done" and rest[-1].data["status"] == "complete"
    reply = await _reply(turn)
    assert (reply.status, reply.finish_reason, reply.content, reply.process) == ("complete", "stop", "All of it.", "")


async def test_a_stop_while_the_consumer_works_between_events_never_cancels_the_consumer(owner, fake_openai):
    """A consumer that awaits work of its own between events (the scheduler's turns run in its task) is never
    cancelled by a stop: the turn ends `stopped` at its next event."""
    turn, events = await _turn(owner, fake_openai, Text("one two three four", pieces=["one ", "two ", "three "],
                                                        delay=0.2))
    assert (await anext(events)).type == "delta"
    await _stop_requested(turn)
    await asyncio.sleep(0.05)  # the consumer's own work: a stop that cancelled its task would raise here

    rest = await asyncio.wait_for(_rest(events), 5)
    assert rest[-1].type == "done" and rest[-1].data["status"] == "stopped"
    assert (await _reply(turn)).status == "stopped"


async def test_a_stop_whose_announcement_never_arrives_ends_the_turn_at_its_next_checkpoint(owner, fake_openai,
                                                                                            monkeypatch):
    """PostgreSQL without Redis, or a lost announcement: only the database says the reply is stopped. The turn's
    checkpoints go on while the upstream is silent, and the first one refused stops it."""
    monkeypatch.setattr(turns, "CHECKPOINT_S", 0.2)
    turn, events = await _turn(owner, fake_openai, Hang("Quiet "))
    assert (await anext(events)).type == "delta"
    message = await _reply(turn)
    assert await sync_to_async(services.message_stop)(message=message)  # and no announcement

    rest = await asyncio.wait_for(_rest(events), 5)
    assert [event.type for event in rest] == ["done"] and rest[0].data["status"] == "stopped"
    reply = await _reply(turn)
    assert (reply.status, reply.content, reply.process) == ("stopped", "Quiet ", "")


def test_a_scheduled_turn_stopped_mid_reply_ends_its_run_with_the_text_so_far(owner, fake_openai):
    """A scheduled prompt that names a session runs a turn in the scheduler's task: a stop request reaches it
    there as it reaches a chat stream (the reply stored `stopped`), and the run ends normally with that text."""
    config_update(changes={"provider": "openai", "base_url": fake_openai.base_url, "model": "m", "kb_enabled": False})
    whole = "one two three four five six"
    fake_openai.script(Text(whole, pieces=[f"{word} " for word in whole.split()[:-1]] + ["six"], delay=0.5))
    session = session_create(owner=owner, name="daily")
    task = scheduling.task_create(owner=owner, name="s", cron="0 * * * *", prompt="go", session_id=session.pk)

    def stop_once_streaming() -> None:
        for _ in range(500):
            reply = ChatMessage.objects.filter(session=session, role="assistant", status="streaming").first()
            if reply is not None and reply.content:  # checkpointed: some text came
                assert services.message_stop(message=reply)
                stops._on_stop(str(reply.pk))
                return
            time.sleep(0.02)

    stopper = threading.Thread(target=stop_once_streaming)
    stopper.start()
    ScheduledTask.objects.filter(pk=task.pk).update(next_run_at=T0)
    [run] = scheduling.tick(now=T0)
    stopper.join(10)
    run.refresh_from_db()
    reply = ChatMessage.objects.get(session=session, role="assistant")
    assert reply.status == "stopped" and reply.content and reply.content != whole
    assert (run.status, run.output) == ("success", reply.content)

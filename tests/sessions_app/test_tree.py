"""A session's tree without HTTP: which path a turn sends (an edit in the middle, a reply that was lost), which
message PATCH {current} selects, and two turns of one session at once."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from asgiref.sync import sync_to_async

from sessions_app import services
from sessions_app.models import ChatMessage, ChatSession
from sessions_app.services import message_append, session_create, session_select
from sessions_app.turns import turn_start
from tests.fakes.llm import Hang, Text
from tests.sessions_app.test_turns import upstream

pytestmark = pytest.mark.django_db(transaction=True)


def _sent(fake_openai) -> list[tuple[str, str]]:
    return [(message["role"], message["content"]) for message in fake_openai.requests[-1].json()["messages"]
            if message["role"] != "system"]


async def _turn(owner, fake_openai, session, message, **how):
    turn = await turn_start(owner=owner, session_id=session.pk, message=message, overrides=upstream(fake_openai),
                            **how)
    [event async for event in turn.events()]
    return turn


def test_selecting_a_branch_goes_to_its_newest_message_not_its_newest_childs_end(owner):
    """Q1 has two replies, A (older) and B; below A, Q2 was edited into Q2' after B was made. Selecting Q1's
    branch goes to where that branch was last continued: the end of Q2', the newest message below Q1."""
    session = session_create(owner=owner)
    q1 = message_append(session=session, role="user", content="q1")
    a = message_append(session=session, role="assistant", content="a", parent_id=q1.pk)
    q2 = message_append(session=session, role="user", content="q2", parent_id=a.pk)
    message_append(session=session, role="assistant", content="r2", parent_id=q2.pk)
    b = message_append(session=session, role="assistant", content="b", parent_id=q1.pk)
    q2_edited = message_append(session=session, role="user", content="q2'", parent_id=a.pk)
    r2_edited = message_append(session=session, role="assistant", content="r2'", parent_id=q2_edited.pk)

    assert session_select(session=session, message_id=q1.pk).current_id == r2_edited.pk
    assert session_select(session=session, message_id=b.pk).current_id == b.pk  # a leaf: itself
    assert session_select(session=session, message_id=q2.pk).current_id == q2.children.get().pk
    assert ChatSession.objects.get(pk=session.pk).current_id == q2.children.get().pk


def test_message_append_follows_current_unless_told_and_moves_it(owner):
    session = session_create(owner=owner)
    first = message_append(session=session, role="user", content="one")
    second = message_append(session=session, role="assistant", content="two")
    beside = message_append(session=session, role="assistant", content="two again", parent_id=first.pk)

    assert (first.parent_id, second.parent_id, beside.parent_id) == (None, first.pk, first.pk)
    assert [first.seq, second.seq, beside.seq] == [1, 2, 3]
    assert ChatSession.objects.get(pk=session.pk).current_id == beside.pk


async def test_an_edit_in_the_middle_sends_its_own_branch_and_the_old_branch_stays_whole(owner, fake_openai):
    session = await sync_to_async(session_create)(owner=owner, name="tree")
    fake_openai.script(Text("R1"), Text("R2"), Text("R3"), Text("R2 edited"), Text("R4"), Text("R3 again"))
    first = await _turn(owner, fake_openai, session, "Q1")
    await _turn(owner, fake_openai, session, "Q2")
    third = await _turn(owner, fake_openai, session, "Q3")

    edited = await _turn(owner, fake_openai, session, "Q2 edited", parent=first.reply_id)
    assert _sent(fake_openai) == [("user", "Q1"), ("assistant", "R1"), ("user", "Q2 edited")]
    await _turn(owner, fake_openai, session, "Q4")
    assert _sent(fake_openai) == [("user", "Q1"), ("assistant", "R1"), ("user", "Q2 edited"),
                                  ("assistant", "R2 edited"), ("user", "Q4")]
    # The old branch's last reply, regenerated: its own path, none of the edit's.
    again = await turn_start(owner=owner, session_id=session.pk, message=None, regenerate=third.reply_id,
                             overrides=upstream(fake_openai))
    [event async for event in again.events()]
    assert _sent(fake_openai) == [("user", "Q1"), ("assistant", "R1"), ("user", "Q2"), ("assistant", "R2"),
                                  ("user", "Q3")]
    stored = await sync_to_async(ChatSession.objects.get)(pk=session.pk)
    assert stored.current_id == again.reply_id
    reply = await sync_to_async(ChatMessage.objects.get)(pk=again.reply_id)
    assert reply.parent_id == third.user_message_id and edited.user_message_id != third.user_message_id


async def test_a_question_after_a_lost_reply_goes_with_it_and_a_stopped_reply_goes_as_it_stopped(owner, fake_openai):
    """A reply lost before any text (its client left at once) leaves its question without an answer: the next
    question follows it, and the model gets both as one user message (roles still alternate). A reply stopped
    with some text goes as that text."""
    session = await sync_to_async(session_create)(owner=owner, name="tree")
    fake_openai.script(Hang())
    lost = await turn_start(owner=owner, session_id=session.pk, message="First?", overrides=upstream(fake_openai))
    events = lost.events()
    await anext(events)
    asking = asyncio.ensure_future(anext(events))
    while not fake_openai.requests:
        await asyncio.sleep(0.02)
    asking.cancel()  # the client leaves before any text
    with pytest.raises(asyncio.CancelledError):
        await asking
    assert (await sync_to_async(ChatMessage.objects.get)(pk=lost.reply_id)).status == "interrupted"

    fake_openai.script(Hang("Half "))
    halted = await turn_start(owner=owner, session_id=session.pk, message="Second?", overrides=upstream(fake_openai))
    events = halted.events()
    await anext(events)
    assert (await anext(events)).data == {"content": "Half "}
    assert _sent(fake_openai) == [("user", "First?\n\nSecond?")]
    await sync_to_async(services.message_stop)(message=await sync_to_async(ChatMessage.objects.get)(
        pk=halted.reply_id))
    halted.stop()
    assert [event.type async for event in events] == ["done"]

    fake_openai.script(Text("Third."))
    await _turn(owner, fake_openai, session, "Third?")
    assert _sent(fake_openai) == [("user", "First?\n\nSecond?"), ("assistant", "Half "), ("user", "Third?")]


async def test_two_turns_of_one_session_at_once_each_keep_their_own_question(owner, fake_openai):
    """Two questions sent at the same moment: each is stored once with its own reply (seq never shared), each
    reply follows its own question, and `current` ends on one of the two replies."""
    session = await sync_to_async(session_create)(owner=owner, name="tree")
    fake_openai.script(Text("Before."))
    before = await _turn(owner, fake_openai, session, "Q0")
    fake_openai.script(Text("One."), Text("Two."))
    turns = await asyncio.gather(*(_turn(owner, fake_openai, session, text) for text in ("A", "B")))

    rows = await sync_to_async(list)(ChatMessage.objects.filter(session=session).order_by("seq").values(
        "id", "parent_id", "role", "content", "status", "seq"))
    assert [row["seq"] for row in rows] == list(range(1, 7))
    by_id = {row["id"]: row for row in rows}
    for turn in turns:
        reply, question = by_id[turn.reply_id], by_id[turn.user_message_id]
        assert reply["parent_id"] == question["id"] and reply["status"] == "complete"
        # Each question follows the reply before it or the other turn's reply: never another question.
        assert by_id[question["parent_id"]]["role"] == "assistant"
    assert {by_id[turn.user_message_id]["content"] for turn in turns} == {"A", "B"}
    current = (await sync_to_async(ChatSession.objects.get)(pk=session.pk)).current_id
    assert current in {turn.reply_id for turn in turns} and isinstance(before.reply_id, uuid.UUID)

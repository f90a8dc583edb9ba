"""Chat titles: a session still called "New chat" is named after its first complete exchange, by the model that
answered or from the question's first words, never over a name its user gave."""

from __future__ import annotations

import threading

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.test import override_settings

from sessions_app.models import ChatSession
from sessions_app.services import session_create
from sessions_app.titles import TITLE_MAX, cleaned, first_words, fitted
from sessions_app.turns import turn_start
from tests.fakes.llm import Error, Hang, Text

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "What is the capital city of France, please?"


def upstream(fake_openai) -> dict:
    return {"provider": "openai", "base_url": fake_openai.base_url, "api_key": "sk-x", "model": "m",
            "request_timeout": 5.0, "kb_enabled": False}


async def _turn(owner, session, message=QUESTION, overrides=None):
    turn = await turn_start(owner=owner, session_id=session.pk, message=message, overrides=overrides)
    return [(event.type, event.data) async for event in turn.events()]


async def _name(session) -> str:
    return (await ChatSession.objects.aget(pk=session.pk)).name


async def test_the_model_that_answered_names_a_new_chat_after_the_first_exchange(owner, fake_openai):
    session = await sync_to_async(session_create)(owner=owner)
    fake_openai.script(Text("Paris."), Text('Title: "Capital of France."\nMore text'), Text("Lyon."))
    events = await _turn(owner, session, overrides=upstream(fake_openai))
    assert [kind for kind, _ in events][-2:] == ["done", "title"]
    assert events[-1][1] == {"session_id": str(session.pk), "name": "Capital of France"}
    assert await _name(session) == "Capital of France"
    asked = fake_openai.bodies()[-1]
    assert asked["model"] == "m" and asked["max_tokens"] == 24
    assert QUESTION in asked["messages"][-1]["content"] and "Paris." in asked["messages"][-1]["content"]
    # The next turn finds the session named: no title request, no title event.
    events = await _turn(owner, session, "And the second city?", overrides=upstream(fake_openai))
    assert events[-1][0] == "done" and len(fake_openai.bodies()) == 3


async def test_a_title_request_that_fails_names_the_chat_from_the_first_words(owner, fake_openai):
    session = await sync_to_async(session_create)(owner=owner)
    fake_openai.script(Text("Paris."), Error(500, "Overloaded."))
    events = await _turn(owner, session, overrides=upstream(fake_openai))
    assert events[-1] == ("title", {"session_id": str(session.pk), "name": "What is the capital city of…"})


async def test_a_title_request_that_takes_too_long_names_the_chat_from_the_first_words(owner, fake_openai):
    session = await sync_to_async(session_create)(owner=owner)
    fake_openai.script(Text("Paris."), Hang())
    with override_settings(AGENTSITE_CHAT_TITLE_TIMEOUT_S=0.3):
        events = await _turn(owner, session, overrides=upstream(fake_openai))
    assert events[-1][1]["name"] == "What is the capital city of…"


async def test_the_offline_stand_in_is_not_asked_for_a_title(owner, fake_openai):
    session = await sync_to_async(session_create)(owner=owner)
    events = await _turn(owner, session, "Hello there")
    assert events[-1] == ("title", {"session_id": str(session.pk), "name": "Hello there"})
    assert fake_openai.bodies() == []


@pytest.mark.parametrize(("mode", "name"), [("words", "What is the capital city of…"), ("off", "New chat")])
async def test_the_setting_chooses_the_first_words_or_no_title(owner, fake_openai, mode, name):
    session = await sync_to_async(session_create)(owner=owner)
    fake_openai.script(Text("Paris."))
    with override_settings(AGENTSITE_CHAT_TITLES=mode):
        events = await _turn(owner, session, overrides=upstream(fake_openai))
    assert len(fake_openai.bodies()) == 1 and await _name(session) == name
    assert events[-1][0] == ("title" if mode == "words" else "done")


async def test_a_session_its_user_named_gets_no_title(owner, fake_openai):
    session = await sync_to_async(session_create)(owner=owner, name="Mine")
    fake_openai.script(Text("Paris."))
    events = await _turn(owner, session, overrides=upstream(fake_openai))
    assert events[-1][0] == "done" and len(fake_openai.bodies()) == 1 and await _name(session) == "Mine"


def _rename(session_id, name: str) -> None:
    try:
        ChatSession.objects.filter(pk=session_id).update(name=name)
    finally:
        connection.close()


async def test_a_name_the_user_gives_while_the_title_is_asked_wins(owner, fake_openai):
    session = await sync_to_async(session_create)(owner=owner)

    def renamed_meanwhile(request):
        # The fake answers on its event loop's thread: the rename (a PUT .../rename would do the same) runs on one
        # of its own, before the title comes back.
        rename = threading.Thread(target=_rename, args=(session.pk, "Mine"))
        rename.start()
        rename.join()
        return Text("A model title")

    fake_openai.script(Text("Paris."), renamed_meanwhile)
    events = await _turn(owner, session, overrides=upstream(fake_openai))
    assert events[-1][0] == "done" and await _name(session) == "Mine"


async def test_a_reply_that_fails_names_nothing(owner, fake_openai):
    session = await sync_to_async(session_create)(owner=owner)
    fake_openai.script(Error(500, "Down."))
    events = await _turn(owner, session, overrides=upstream(fake_openai))
    assert events[-1][0] == "error" and await _name(session) == "New chat"


def test_a_model_title_is_cleaned_to_one_short_line():
    assert cleaned("<think>\nhmm\n</think>\n\n**\u201cTrains to Lyon\u201d.**\nsecond line") == "Trains to Lyon"
    assert cleaned("  \n") == "" and cleaned("Title: 'Paris'") == "Paris"
    assert cleaned("word " * 30).endswith("…") and len(cleaned("word " * 30)) <= TITLE_MAX


def test_a_title_is_cut_at_a_word_past_sixty_characters_only():
    exact = "a" * 59 + "b"
    assert fitted(exact) == exact
    assert fitted(exact + "c") == "a" * 59 + "…"
    assert fitted("one two " + "x" * 60) == "one two…"
    marked = "## Explain `asyncio` *cancellation* to me in detail"
    assert first_words(marked) == "Explain asyncio cancellation to me in…"
    assert first_words("Short question") == "Short question" and first_words("``` ```") == ""

"""Chat titles: a session still called "New chat" is named after a complete exchange (docs/api.md, Chat stream).

AGENTSITE_CHAT_TITLES `model` (the default) asks the model that answered for a short title of the first exchange
(a few tokens, metered as the owner's chat usage, AGENTSITE_CHAT_TITLE_TIMEOUT_S at most); with the offline
stand-in, on any failure, or with `words`, the title is the question's first words; `off` names nothing.

The invariant: a title never replaces a name the user gave. The rename is a compare-and-set on the default name,
so a rename that lands while the title is being asked wins.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import uuid
from typing import TYPE_CHECKING

from django.conf import settings as django_settings

from agentsite.agent.config import AgentSettings
from agentsite.agent.loop import AgentEvent
from agentsite.agent.routing import resolve, routed_provider
from agentsite.agent.types import ChatRequest, Message, ModelSettings
from agentsite.agent.usage import Caller, caller_for, metered
from agentsite.core.dbcall import db
from agentsite.core.errors import AppError
from sessions_app.models import ChatSession

if TYPE_CHECKING:
    from sessions_app.turns import ChatTurn

logger = logging.getLogger(__name__)

DEFAULT_NAME = "New chat"  # ChatSession.name's default: a session its user never named
TITLE_MAX = 60
TITLE_WORDS = 6
EXCHANGE_CHARS = 1000  # of the question and of the answer, in the title request
TITLE_MAX_TOKENS = 24
PROMPT = ("Write a title for this conversation: at most six words, in the language of the question, without "
          "quotes or final punctuation. Answer with the title only.")
_THINKING = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_LABEL = re.compile(r"^\s*title\s*:\s*", re.IGNORECASE)
_MARKS = " \t\"'`*#_“”‘’«»"
_MARKUP = re.compile(r"[`*_#>\[\]|]+")


def fitted(text: str, limit: int = TITLE_MAX) -> str:
    """`text` on one line, cut at a word to at most `limit` characters (an ellipsis marks the cut)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[:limit - 1]
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut).rstrip(" ,;:-") + "…"


def first_words(question: str) -> str:
    """The question's first TITLE_WORDS words, Markdown marks left out, at most TITLE_MAX characters ("" when it
    has no words)."""
    words = _MARKUP.sub(" ", question).split()
    return fitted(" ".join(words[:TITLE_WORDS]) + ("…" if len(words) > TITLE_WORDS else ""))


def cleaned(reply: str) -> str:
    """A model's title as a session name: its first line of text (a reasoning model's <think> left out), without
    a `Title:` label, quotes, Markdown marks or a final period, at most TITLE_MAX characters; "" when none."""
    lines = [line.strip() for line in _THINKING.sub("", reply).splitlines() if line.strip()]
    if not lines:
        return ""
    return fitted(_LABEL.sub("", lines[0]).strip(_MARKS).rstrip(".").strip(_MARKS))


async def title_event(turn: ChatTurn) -> AgentEvent | None:
    """After the turn's `done`: name its session when it is still DEFAULT_NAME (the module's rule), and return the
    `title {session_id, name}` event; None when the session was not named by this turn. Never raises but
    CancelledError (the stream was closed meanwhile: the session keeps its name)."""
    mode = getattr(django_settings, "AGENTSITE_CHAT_TITLES", "model")
    if mode == "off" or turn.session.name != DEFAULT_NAME:
        return None
    question, answer = first_exchange(turn.messages, turn.transcript.text)
    title = ""
    if question and mode == "model" and not _offline(turn.settings, turn.transcript.answered or turn.settings.model):
        title = await _model_title(turn, question, answer)
    title = title or first_words(question)
    if not title or not await db(session_name_if_default, session_id=turn.session.pk, name=title):
        return None
    turn.session.name = title
    return turn.event("title", {"session_id": str(turn.session.pk), "name": title})


def first_exchange(messages: list[Message], reply: str) -> tuple[str, str]:
    """The first question of a turn's history and the first answer to it (`reply`, this turn's, when the history
    holds none)."""
    question, answer = "", ""
    for message in messages:
        if message.role == "user" and not question:
            question = message.text
        elif message.role == "user":
            break
        elif message.role == "assistant" and question and message.text.strip():
            answer = message.text
            break
    return question, answer or reply


def _offline(settings: AgentSettings, model: str) -> bool:
    """Whether the model that answered is the offline stand-in (or no longer resolves): it makes no titles."""
    try:
        route = resolve(model, settings)
    except AppError:
        return True
    return all(target.connection.provider == "offline" for target in route.targets)


async def _model_title(turn: ChatTurn, question: str, answer: str) -> str:
    """The title the model that answered gives the exchange, cleaned; "" when it failed or took too long."""
    model = turn.transcript.answered or turn.settings.model
    caller: Caller = turn.caller or caller_for(turn.owner_id, "chat")
    if turn.settings.agent and not caller.agent:  # usage is recorded with the agent, as the turn's own calls
        caller = dataclasses.replace(caller, agent=turn.settings.agent)
    request = ChatRequest([Message("system", PROMPT), Message("user", f"Question: {question[:EXCHANGE_CHARS]}\n\n"
                                                                      f"Answer: {answer[:EXCHANGE_CHARS]}")],
                          settings=ModelSettings(model=model, temperature=0.2, max_tokens=TITLE_MAX_TOKENS))
    timeout = float(getattr(django_settings, "AGENTSITE_CHAT_TITLE_TIMEOUT_S", 5.0))
    try:
        provider = metered(routed_provider(turn.settings, model), caller)
        async with asyncio.timeout(timeout):  # not wait_for: on 3.11 it can swallow the client's hang-up
            completion = await provider.complete(request)
    except (AppError, TimeoutError) as exc:  # an upstream failure, a spent budget, a slow model: the first words
        logger.info("No title from the model %s (%s); the question's first words name the chat", model,
                    getattr(exc, "code", "timeout"))
        return ""
    except Exception:  # a boundary: a title is never worth failing the stream that has already ended well
        logger.exception("Asking the model %s for a chat title failed", model)
        return ""
    return cleaned(completion.text)


def session_name_if_default(*, session_id: uuid.UUID, name: str) -> bool:
    """Rename the session to `name` if it is still called DEFAULT_NAME (compare-and-set: a name its user gave
    meanwhile stays); whether it was renamed."""
    return bool(ChatSession.objects.filter(pk=session_id, name=DEFAULT_NAME).update(name=name))

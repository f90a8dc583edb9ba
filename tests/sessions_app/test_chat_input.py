"""The chat body's fast reading (sessions_app.api.chat_input) gives what the serializer gives: the same data for
every body it takes, and for every other body the serializer's own answer, errors included."""

from __future__ import annotations

import pytest

from agentsite.core.errors import AppError
from agentsite.core.validation import validated
from sessions_app.api import ChatInputSerializer, chat_input

BODIES = [
    {"message": "Count for me."},
    {"message": "   "},
    {"message": " padded "},
    {"message": "line\nbreak", "attachments": []},
    {"message": "ünïcödé 漢字 🙂"},
    {"message": "x", "attachments": ["a" * 64]},
    {"message": "x", "attachments": ["a" * 65]},
    {"message": "x", "attachments": [" spaced "]},
    {"message": "x", "attachments": [""]},
    {"message": "x", "attachments": ["   "]},
    {"message": "x", "attachments": ["u"] * 20},
    {"message": "x", "attachments": ["u"] * 21},
    {"message": "x", "attachments": None},
    {"message": "x", "attachments": "u1"},
    {"message": "x", "attachments": [1]},
    {"message": "x", "model": ""},
    {"message": "x", "model": "  "},
    {"message": "x", "model": " default/m "},
    {"message": "x", "model": "default/fake-model"},
    {"message": "x", "model": "m" * 200},
    {"message": "x", "model": "m" * 201},
    {"message": "x", "model": None},
    {"message": "x", "model": 5},
    {"message": ""},
    {"message": None},
    {"message": 5},
    {"message": True},
    {"message": ["x"]},
    {"message": "nul \x00 inside"},
    {"message": "lone \ud800 surrogate"},
    {"message": "x", "attachments": ["nul\x00"]},
    {"message": "x", "model": "m\udfff"},
    {},
    {"attachments": []},
    {"message": "x", "title": "y"},
    {"message": "x", "attachments": [], "model": "m", "extra": 1},
]


def _outcome(read, body):
    try:
        return "data", dict(read(body))
    except AppError as exc:
        return "error", (exc.code, exc.status, exc.message, exc.details)


@pytest.mark.parametrize("body", BODIES, ids=[repr(body)[:60] for body in BODIES])
def test_the_fast_reading_answers_as_the_serializer_does(body):
    assert _outcome(chat_input, body) == _outcome(lambda data: validated(ChatInputSerializer, data), body)


def test_the_usual_body_skips_the_serializer(monkeypatch):
    from sessions_app import api

    monkeypatch.setattr(api, "validated", lambda *args, **kwargs: pytest.fail("the serializer was asked"))
    assert chat_input({"message": "Count for me.", "attachments": ["u1"], "model": "default/m"}) == {
        "message": "Count for me.", "attachments": ["u1"], "model": "default/m"}

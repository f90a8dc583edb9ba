"""Hostile chat imports and what they leave behind: stored odd data never breaks reading, exporting or continuing the
chat (never a 500), and a document shaped to make the reader work for minutes is read in linear time."""

from __future__ import annotations

import json

import pytest

from sessions_app import chatgpt, importdoc
from sessions_app.models import ChatSession
from sessions_app.services import message_append

pytestmark = pytest.mark.django_db


def _document(**reply) -> dict:
    return {"format": "agentsite.chat", "version": 1, "session": {"name": "Odd"},
            "messages": [{"id": "q", "role": "user", "content": "Hi"},
                         {"id": "a", "parent": "q", "role": "assistant", "content": "Hello", **reply}]}


ODD_REPLIES = [
    {"tool_calls": [{"id": "c1", "name": "t", "arguments": {}, "result": "a string, not an object"}]},
    {"tool_calls": [{"id": 5, "name": ["t"], "arguments": "x", "result": {"content": 1, "is_error": "no"}}]},
    {"sources": [{"document": "a string", "collection": "a string"}]},
    {"sources": [{"document": {"filename": {"x": 1}}, "chunk_index": {}, "text": 5}]},
    {"usage": {"prompt_tokens": "many"}},
]


@pytest.mark.parametrize("reply", ODD_REPLIES)
def test_an_imported_reply_with_odd_steps_or_sources_is_refused_or_read_back_without_a_500(owner_client, reply):
    response = owner_client.post("/api/sessions/import", _document(**reply), format="json")
    if response.status_code == 400:
        assert response.json()["error"]["code"] == "invalid"
        assert not ChatSession.objects.exists()
        return
    assert response.status_code == 201, response.content
    pk = response.json()["imported"][0]["id"]
    assert owner_client.get(f"/api/sessions/{pk}/messages").status_code == 200
    for format_ in ("json", "markdown"):
        assert owner_client.get(f"/api/sessions/{pk}/export?format={format_}").status_code == 200


@pytest.mark.parametrize("when", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"])
def test_an_imported_time_at_the_edge_of_the_calendar_is_refused_or_stored(owner_client, when):
    document = _document(created_at=when)
    document["session"]["created_at"] = when
    response = owner_client.post("/api/sessions/import", document, format="json")
    assert response.status_code in (201, 400), response.content
    if response.status_code == 201:
        assert owner_client.get("/api/sessions").status_code == 200
        pk = response.json()["imported"][0]["id"]
        assert owner_client.get(f"/api/sessions/{pk}/export").status_code == 200


def _chatgpt(mapping: dict, current: str | None = None) -> list:
    return [{"title": "Big", "create_time": 1.0, "mapping": mapping, "current_node": current}]


def _hidden(key: str, parent: str | None) -> dict:
    return {"id": key, "parent": parent, "message": None}


def _text(key: str, parent: str, role: str, text: str) -> dict:
    return {"id": key, "parent": parent, "message": {"author": {"role": role}, "create_time": 1.0,
                                                    "content": {"content_type": "text", "parts": [text]}}}


def test_many_replies_below_a_long_chain_of_skipped_nodes_read_in_linear_time(owner_client):
    chain = 20_000
    mapping = {f"n{i}": _hidden(f"n{i}", f"n{i - 1}" if i else None) for i in range(chain)}
    for i in range(chain):
        mapping[f"m{i}"] = _text(f"m{i}", f"n{chain - 1}", "user", "q")
    response = owner_client.post("/api/sessions/import", _chatgpt(mapping), format="json")
    assert response.status_code == 201, response.content


class CountingParents(dict):
    """A node -> parent map that counts the parents looked up."""

    lookups = 0

    def get(self, *args):
        self.lookups += 1
        return super().get(*args)


def test_finding_kept_ancestors_walks_each_skipped_node_once():
    # The work, counted rather than timed: 2,000 messages below one chain of 2,000 skipped nodes look up each
    # node of the chain once (walking the chain again for each message looked up 4,000,000).
    chain = 2_000
    parents = CountingParents({f"n{i}": f"n{i - 1}" if i else None for i in range(chain)})
    found: dict = {}
    for _ in range(chain):
        assert chatgpt._kept_ancestor(parents, {}, f"n{chain - 1}", "where", found) is None
    assert parents.lookups <= chain + 1


def test_a_long_run_of_one_role_joins_in_linear_time(owner_client):
    count = 40_000
    mapping = {"r": _text("r", None, "user", "q")}
    mapping["r"]["parent"] = None
    for i in range(count):
        mapping[f"a{i}"] = _text(f"a{i}", f"a{i - 1}" if i else "r", "assistant", "x" * 3)
    response = owner_client.post("/api/sessions/import", _chatgpt(mapping), format="json")
    assert response.status_code == 201, response.content
    assert json.loads(owner_client.get(f"/api/sessions/{response.json()['imported'][0]['id']}/export").content)


@pytest.mark.parametrize(("reply", "where"), [
    (ODD_REPLIES[0], "messages.1.tool_calls.0.result"),
    (ODD_REPLIES[1], "messages.1.tool_calls.0.result.content"),
    (ODD_REPLIES[2], "messages.1.sources.0.collection"),
    ({"sources": [{"document": "a.md"}]}, "messages.1.sources.0.document"),
    (ODD_REPLIES[3], "messages.1.sources.0.document.filename"),
    ({"sources": [{"document": {"filename": "a.md"}, "chunk_index": True}]}, "messages.1.sources.0.chunk_index"),
    ({"tool_calls": [{"id": "c", "result": {"content": "r", "is_error": 1}}]},
     "messages.1.tool_calls.0.result.is_error"),
])
def test_an_imported_step_or_source_of_another_shape_is_refused_naming_where(owner_client, reply, where):
    response = owner_client.post("/api/sessions/import", _document(**reply), format="json")
    assert response.status_code == 400, response.content
    named = list(response.json()["error"]["details"])
    assert len(named) == 1 and (named[0] == where or named[0].startswith(where + ".")), named  # the string's own path
    assert not ChatSession.objects.exists()


def test_an_imported_step_and_source_in_the_stored_shape_keep_their_fields_and_drop_others(owner_client):
    call = {"id": "c1", "name": "calc", "arguments": {"x": 1}, "extra": "dropped",
            "result": {"content": "2", "is_error": False, "duration_ms": 3}}
    source = {"collection": None, "document": {"id": None, "filename": "a.md"}, "chunk_index": 0, "score": 0.5,
              "rank_score": None, "text": "passage", "extra": "dropped"}
    response = owner_client.post("/api/sessions/import", _document(tool_calls=[call], sources=[source]),
                                 format="json")
    assert response.status_code == 201, response.content
    reply = owner_client.get(f"/api/sessions/{response.json()['imported'][0]['id']}/messages").json()["results"][1]
    assert reply["steps"] == [{"type": "tool_call", "id": "c1", "name": "calc", "arguments": {"x": 1}, "result": "2",
                               "is_error": False, "duration_ms": 3}]
    assert reply["sources"] == [{key: value for key, value in source.items() if key != "extra"}]


def test_a_message_holding_one_very_long_word_is_stored_and_found_by_its_other_words(owner_client, owner):
    # PostgreSQL's tsvector takes words up to 2,047 bytes, and its index prefixes each word with the owner's id:
    # a 2,046-letter word (a hex blob) once made the index's trigger refuse the message, and the write fail.
    word = "a" * 2046
    response = owner_client.post("/api/sessions/import", _document(content=f"{word} zebra"), format="json")
    assert response.status_code == 201, response.content
    session = ChatSession.objects.get(pk=response.json()["imported"][0]["id"])
    message_append(session=session, role="user", content=f"{'b' * 2047} quagga")
    for word in ("zebra", "quagga"):
        found = owner_client.get("/api/sessions", {"q": word}).json()
        assert [result["id"] for result in found["results"]] == [str(session.pk)], word


def _chatgpt_one(text: str, **metadata) -> list:
    mapping = {"r": _text("r", None, "user", text)}
    mapping["r"]["parent"] = None
    mapping["r"]["message"]["metadata"] = metadata
    return _chatgpt(mapping)


PARTS = "conversations.0.mapping.r.message.content.parts"
NOT_TEXT = [
    (_document(content="\udfff"), "messages.1.content"),
    ({**_document(), "session": {"name": "\ud83d"}}, "session.name"),
    (_document(usage={"\ud800": 1}), "messages.1.usage"),
    (_document(tool_calls=[{"id": "c", "arguments": {"x": ["\udc00"]}}]), "messages.1.tool_calls.0.arguments"),
    (_chatgpt_one("\ud800 hello"), PARTS),
    (_chatgpt_one("a NUL \x00 inside"), PARTS),
]


@pytest.mark.parametrize(("body", "where"), NOT_TEXT)
def test_a_lone_surrogate_or_a_nul_anywhere_in_an_import_is_refused_naming_where(owner_client, body, where):
    raw = json.dumps(body)  # the escapes as a client sends them: json.loads makes them lone surrogates
    response = owner_client.post("/api/sessions/import", raw, content_type="application/json")
    assert response.status_code == 400, response.content
    named = list(response.json()["error"]["details"])
    assert len(named) == 1 and (named[0] == where or named[0].startswith(where + ".")), named  # the string's own path
    assert not ChatSession.objects.exists()


def test_a_chatgpt_model_slug_that_no_column_takes_is_refused_naming_it(owner_client):
    for slug in ("gpt\ud800", "gpt\x00"):
        response = owner_client.post("/api/sessions/import", json.dumps(_chatgpt_one("hello", model_slug=slug)),
                                     content_type="application/json")
        assert response.status_code == 400, response.content
        assert list(response.json()["error"]["details"]) == ["conversations.0.mapping.r.message.metadata.model_slug"]
        assert not ChatSession.objects.exists()


def test_a_body_of_more_json_objects_than_an_import_takes_is_refused_before_it_is_parsed(owner_client, monkeypatch):
    document = _chatgpt({"r": {**_text("r", "r", "user", "q"), "parent": None}})
    at_limit = json.dumps(document + [{"title": None, "mapping": {}}] * 17)
    monkeypatch.setattr(importdoc, "MAX_IMPORT_CONTAINERS", at_limit.count("{") + at_limit.count("["))
    assert owner_client.post("/api/sessions/import", at_limit, content_type="application/json").status_code == 201
    past = json.dumps(document + [{"title": None, "mapping": {}}] * 17 + [[]])
    refused = owner_client.post("/api/sessions/import", past, content_type="application/json")
    assert refused.status_code == 400 and list(refused.json()["error"]["details"]) == ["body"]
    assert ChatSession.objects.count() == 18

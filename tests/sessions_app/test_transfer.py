"""Export (Markdown: the selected path; JSON: the whole tree) and import (that JSON, ChatGPT's conversations.json):
all or nothing, with errors naming where."""

from __future__ import annotations

import copy
import json

import pytest
from django.test import override_settings

from agentsite.agent.types import MAX_MESSAGE_CHARS
from sessions_app import importdoc
from sessions_app.models import ChatMessage, ChatSession
from sessions_app.services import message_append
from tests.sessions_app.chatgpt_export import conversations, node

pytestmark = pytest.mark.django_db


def _branched(owner) -> ChatSession:
    """q1 -> a1 (complete, a tool step and a source) | a1' (stopped), then q2 -> a2 after a1; current: a2."""
    session = ChatSession.objects.create(owner=owner, name="Branched")
    q1 = message_append(session=session, role="user", content="What is $e^{i\\pi}$?")
    a1 = message_append(session=session, role="assistant", content="It is **-1**.", model="default/fake-model",
                        agent="default", ttft_ms=120, usage={"prompt_tokens": 5, "completion_tokens": 3,
                                                            "total_tokens": 8},
                        tool_calls=[{"id": "c1", "name": "calculator", "arguments": {"x": "e^(i*pi)"},
                                     "result": {"content": "-1", "is_error": False, "duration_ms": 4}}],
                        sources=[{"collection": {"id": "k1", "name": "Maths"}, "document": {"id": "d1",
                                  "filename": "euler.md"}, "chunk_index": 2, "score": 0.8, "rank_score": 0.9,
                                  "text": "Euler's identity"}], finish_reason="stop")
    message_append(session=session, role="assistant", content="Minus one", parent_id=q1.pk, status="stopped",
                   finish_reason="stopped", model="default/fake-model")
    message_append(session=session, role="user", content="And $e^{0}$?", parent_id=a1.pk)
    message_append(session=session, role="assistant", content="One.", model="default/fake-model")
    return session


def _structure(document: dict) -> dict:
    """The document without ids and times: ids become positions."""
    document = copy.deepcopy(document)
    position = {message["id"]: index for index, message in enumerate(document["messages"])}
    for message in document["messages"]:
        message["id"] = position[message["id"]]
        message["parent"] = position.get(message["parent"])
        message.pop("created_at")
    document["current"] = position.get(document["current"])
    for key in ("id", "created_at", "updated_at"):
        document["session"].pop(key)
    return document


def test_json_export_import_and_export_again_round_trips_a_branched_session(owner_client, owner):
    session = _branched(owner)
    exported = owner_client.get(f"/api/sessions/{session.pk}/export?format=json")
    assert exported.status_code == 200
    day = f"{session.created_at:%Y-%m-%d}"
    assert exported["Content-Disposition"] == f'attachment; filename="chat-branched-{day}.json"'
    document = json.loads(exported.content)
    assert (document["format"], document["version"]) == ("agentsite.chat", 1)
    assert [message["status"] for message in document["messages"]] == ["complete", "complete", "stopped",
                                                                         "complete", "complete"]
    imported = owner_client.post("/api/sessions/import", document, format="json")
    assert imported.status_code == 201, imported.content
    body = imported.json()
    assert body["count"] == 1 and body["imported"][0]["name"] == "Branched"
    assert body["imported"][0]["message_count"] == 5
    new_id = body["imported"][0]["id"]
    assert new_id != str(session.pk)
    again = json.loads(owner_client.get(f"/api/sessions/{new_id}/export").content)
    assert _structure(again) == _structure(document)
    assert {message["id"] for message in again["messages"]}.isdisjoint(m["id"] for m in document["messages"])
    assert [m["created_at"] for m in again["messages"]] == [m["created_at"] for m in document["messages"]]


def test_markdown_export_is_the_selected_path_with_roles_models_steps_and_sources(owner_client, owner):
    session = _branched(owner)
    response = owner_client.get(f"/api/sessions/{session.pk}/export?format=markdown")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/markdown")
    assert response["Content-Disposition"].startswith('attachment; filename="chat-branched-')
    text = response.content.decode()
    assert text.startswith("# Branched\n")
    assert "It is **-1**." in text and "One." in text and "Minus one" not in text  # the sibling is not on the path
    assert text.count("### User") == 2 and text.count("### Assistant — default/fake-model") == 2
    assert "- `calculator` `{\"x\": \"e^(i*pi)\"}` → -1" in text
    assert "1. euler.md (Maths), passage 2: Euler's identity" in text
    assert text.index("What is $e^{i\\pi}$?") < text.index("It is **-1**.") < text.index("And $e^{0}$?")


def test_the_default_export_is_json_and_an_unknown_format_is_refused(owner_client, owner):
    session = _branched(owner)
    assert json.loads(owner_client.get(f"/api/sessions/{session.pk}/export").content)["format"] == "agentsite.chat"
    refused = owner_client.get(f"/api/sessions/{session.pk}/export?format=pdf")
    assert refused.status_code == 400 and refused.json()["error"]["details"].keys() == {"format"}


def test_a_file_name_keeps_only_ascii_letters_and_digits(owner_client, owner):
    session = ChatSession.objects.create(owner=owner, name='../../etc/"pass wd"\r\nX: y')
    disposition = owner_client.get(f"/api/sessions/{session.pk}/export?format=markdown")["Content-Disposition"]
    assert disposition == f'attachment; filename="chat-etc-pass-wd-x-y-{session.created_at:%Y-%m-%d}.md"'


def test_another_users_session_is_not_exported(other_client, owner):
    session = _branched(owner)
    for format_ in ("json", "markdown"):
        assert other_client.get(f"/api/sessions/{session.pk}/export?format={format_}").status_code == 404


def test_a_chatgpt_export_with_two_conversations_imports_as_two_sessions_keeping_the_branches(owner_client, owner):
    response = owner_client.post("/api/sessions/import", conversations(), format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["count"] == 2 and [s["name"] for s in body["imported"]] == ["Trip to Lyon", "A photo"]
    trip = ChatSession.objects.get(pk=body["imported"][0]["id"], owner=owner)
    messages = list(trip.messages.order_by("seq"))
    assert [(m.role, m.content) for m in messages] == [
        ("user", "How far is Lyon from Paris?"), ("assistant", "About 465 km."),
        ("user", "How long is the train from Paris to Lyon?"),
        ("assistant", "About two hours by TGV.\n\nBook early for the best fares.")]
    q1, a1, q1b, a1b = messages
    assert (q1.parent_id, a1.parent_id, q1b.parent_id, a1b.parent_id) == (None, q1.pk, None, q1b.pk)
    assert trip.current_id == a1b.pk and a1b.model == "gpt-4o"
    assert trip.created_at.timestamp() == 1_717_000_000 and q1.created_at.timestamp() == 1_717_000_003
    photo = ChatSession.objects.get(pk=body["imported"][1]["id"])
    assert [m.content for m in photo.messages.order_by("seq")] == [
        "[attachment not imported]\n\nWhat is in this photo?", "A cat on a sofa."]
    tree = owner_client.get(f"/api/sessions/{trip.pk}/messages").json()
    assert tree["current"] == str(a1b.pk)


def test_a_conversation_without_current_node_selects_its_newest_leaf(owner_client):
    document = conversations()[:1]
    document[0]["current_node"] = None
    body = owner_client.post("/api/sessions/import", document, format="json").json()
    trip = ChatSession.objects.get(pk=body["imported"][0]["id"])
    assert trip.current.content.startswith("About two hours")


@pytest.mark.parametrize(("change", "where"), [
    (lambda d: d[1]["mapping"]["p2"].update(parent="nowhere"), "conversations.1.mapping.p2.parent"),
    (lambda d: d[0].update(current_node="nowhere"), "conversations.0.current_node"),
    (lambda d: d[0]["mapping"]["a1"]["message"]["author"].update(role=5),
     "conversations.0.mapping.a1.message.author.role"),
    (lambda d: d[0]["mapping"]["q1"]["message"]["content"].update(parts=[7]),
     "conversations.0.mapping.q1.message.content.parts.0"),
    (lambda d: d[0]["mapping"]["q1"]["message"].update(create_time="yesterday"),
     "conversations.0.mapping.q1.message.create_time"),
    (lambda d: d[1].update(mapping=[]), "conversations.1.mapping"),
    (lambda d: d.append("not a conversation"), "conversations.2"),
    (lambda d: d[1]["mapping"]["r"].update(parent="p2"), "conversations.1.mapping.p1.parent"),
])
def test_a_malformed_chatgpt_export_is_refused_naming_where_and_nothing_is_stored(owner_client, owner, change, where):
    document = conversations()
    change(document)
    response = owner_client.post("/api/sessions/import", document, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "invalid"
    assert list(response.json()["error"]["details"]) == [where]
    assert not ChatSession.objects.filter(owner=owner).exists()


def test_a_message_longer_than_the_chat_takes_is_refused(owner_client, owner):
    document = conversations()
    document[1]["mapping"]["p2"]["message"]["content"]["parts"] = ["x" * MAX_MESSAGE_CHARS]
    assert owner_client.post("/api/sessions/import", document, format="json").status_code == 201
    document[1]["mapping"]["p2"]["message"]["content"]["parts"] = ["x" * (MAX_MESSAGE_CHARS + 1)]
    refused = owner_client.post("/api/sessions/import", document, format="json")
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "message_too_long"
    assert list(refused.json()["error"]["details"]) == ["conversations.1.mapping.p2.message.content.parts"]
    assert ChatSession.objects.filter(owner=owner).count() == 2  # the first import only


def test_an_import_past_the_conversation_cap_is_refused(owner_client, owner, monkeypatch):
    monkeypatch.setattr(importdoc, "MAX_IMPORT_SESSIONS", 2)
    assert owner_client.post("/api/sessions/import", conversations(), format="json").status_code == 201
    refused = owner_client.post("/api/sessions/import", [*conversations(), conversations()[1]], format="json")
    assert refused.status_code == 400 and list(refused.json()["error"]["details"]) == ["conversations"]
    assert ChatSession.objects.filter(owner=owner).count() == 2


def test_an_import_past_the_message_cap_is_refused(owner_client, owner, monkeypatch):
    monkeypatch.setattr(importdoc, "MAX_IMPORT_MESSAGES", 13)  # the export holds 13 nodes
    assert owner_client.post("/api/sessions/import", conversations(), format="json").status_code == 201
    document = conversations()
    document[1]["mapping"]["extra"] = node("extra", "p2", [], "user", "More?", at=102)
    refused = owner_client.post("/api/sessions/import", document, format="json")
    assert refused.status_code == 400 and list(refused.json()["error"]["details"]) == ["messages"]


@pytest.mark.parametrize(("change", "where"), [
    (lambda d: d["messages"][3].update(parent="nope"), "messages.3.parent"),
    (lambda d: d["messages"].reverse(), "messages.0.parent"),
    (lambda d: d["messages"][2].update(role="system"), "messages.2.role"),
    (lambda d: d["messages"][2].update(status="done"), "messages.2.status"),
    (lambda d: d["messages"][1].update(id=d["messages"][0]["id"]), "messages.1.id"),
    (lambda d: d.update(current="nope"), "current"),
    (lambda d: d.update(version=2), "version"),
    (lambda d: d["session"].update(name="n" * 201), "session.name"),
    (lambda d: d["messages"][4].update(ttft_ms=-1), "messages.4.ttft_ms"),
    (lambda d: d.update(format="other"), "format"),
])
def test_a_malformed_chat_export_is_refused_naming_where_and_nothing_is_stored(owner_client, owner, change, where):
    document = json.loads(owner_client.get(f"/api/sessions/{_branched(owner).pk}/export").content)
    change(document)
    response = owner_client.post("/api/sessions/import", document, format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()["error"]["details"]) == [where]
    assert ChatSession.objects.filter(owner=owner).count() == 1 and ChatMessage.objects.count() == 5


def test_a_streaming_reply_imports_as_interrupted_and_an_unknown_agent_or_model_falls_back(owner_client, owner):
    document = {"format": "agentsite.chat", "version": 1,
                "session": {"name": "Minimal", "agent": "no-such-agent", "model": "nowhere/none"},
                "messages": [{"id": "a", "role": "user", "content": "Hi"},
                             {"id": "b", "parent": "a", "role": "assistant", "content": "Hel", "status": "streaming",
                              "attachments": ["0f0e0d0c-0000-0000-0000-000000000000"]}]}
    body = owner_client.post("/api/sessions/import", document, format="json").json()
    session = body["imported"][0]
    assert (session["agent"], session["model"], session["current"] is not None) == ("default", "", True)
    reply = ChatMessage.objects.get(pk=session["current"])
    assert (reply.status, reply.content, reply.attachments) == ("interrupted", "Hel", [])


def test_an_import_body_may_be_larger_than_other_paths_take_but_not_past_its_limit(owner_client):
    filler = "x" * (11 * 1024 * 1024)
    document = conversations()
    document[0]["moderation_results"] = [filler]
    assert owner_client.post("/api/sessions/import", document, format="json").status_code == 201
    with override_settings(MAX_BODY_BYTES_BY_PATH={"/api/sessions/import": 1024}):
        refused = owner_client.post("/api/sessions/import", conversations(), format="json")
    assert refused.status_code == 413


def test_an_import_that_is_not_json_is_refused(owner_client):
    response = owner_client.post("/api/sessions/import", "title,text\n", content_type="text/csv")
    assert response.status_code == 415

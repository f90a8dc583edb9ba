import uuid

import pytest

from sessions_app.models import ChatMessage, ChatSession
from sessions_app.services import message_append

pytestmark = pytest.mark.django_db


def test_create_list_get_rename_delete_a_session(owner_client):
    created = owner_client.post("/api/sessions", {}, format="json")
    assert created.status_code == 201
    session = created.json()
    assert session["name"] == "New chat"
    assert session["message_count"] == 0
    assert set(session) == {"id", "name", "model", "agent", "current", "pinned", "archived", "created_at",
                            "updated_at", "message_count"}
    listed = owner_client.get("/api/sessions").json()
    assert listed["count"] == 1 and listed["results"][0]["id"] == session["id"]
    renamed = owner_client.put(f"/api/sessions/{session['id']}/rename", {"name": "Trip plans"}, format="json")
    assert renamed.status_code == 200 and renamed.json()["name"] == "Trip plans"
    assert owner_client.get(f"/api/sessions/{session['id']}").json()["name"] == "Trip plans"
    assert owner_client.delete(f"/api/sessions/{session['id']}").status_code == 204
    assert owner_client.get(f"/api/sessions/{session['id']}").status_code == 404


def test_deleting_a_session_deletes_its_messages(owner_client, owner):
    session = ChatSession.objects.create(owner=owner)
    message_append(session=session, role="user", content="hi")
    owner_client.delete(f"/api/sessions/{session.pk}")
    assert not ChatMessage.objects.filter(session_id=session.pk).exists()


def test_messages_are_listed_oldest_first_with_their_fields(owner_client, owner):
    session = ChatSession.objects.create(owner=owner, name="s")
    message_append(session=session, role="user", content="first")
    message_append(session=session, role="assistant", content="second", status="interrupted")
    body = owner_client.get(f"/api/sessions/{session.pk}/messages").json()
    assert body["count"] == 2
    assert [m["content"] for m in body["results"]] == ["first", "second"]
    assert body["results"][1]["status"] == "interrupted"
    assert {"id", "role", "content", "attachments", "tool_calls", "status", "created_at"} <= set(body["results"][0])
    assert owner_client.get(f"/api/sessions/{session.pk}").json()["message_count"] == 2


def test_another_users_session_is_404_everywhere(other_client, owner):
    session = ChatSession.objects.create(owner=owner, name="private")
    message_append(session=session, role="user", content="secret")
    base = f"/api/sessions/{session.pk}"
    for method, path, body in [("get", base, None), ("get", f"{base}/messages", None),
                               ("put", f"{base}/rename", {"name": "x"}), ("delete", base, None),
                               ("post", f"{base}/chat", {"message": "hi"})]:
        response = getattr(other_client, method)(path, body, format="json")
        assert response.status_code == 404, (method, path)
        assert response.json()["error"]["code"] == "not_found"
    assert other_client.get("/api/sessions").json()["count"] == 0
    assert ChatSession.objects.get(pk=session.pk).name == "private"


def test_sessions_are_paginated(owner_client, owner):
    ChatSession.objects.bulk_create([ChatSession(owner=owner, name=f"s{i}") for i in range(7)])
    page = owner_client.get("/api/sessions?limit=3&offset=3").json()
    assert page["count"] == 7 and len(page["results"]) == 3
    assert page["next"] and page["previous"]
    capped = owner_client.get("/api/sessions?limit=5000").json()
    assert len(capped["results"]) == 7


@pytest.mark.parametrize("name", ["", "x" * 201])
def test_rename_validates_the_name(owner_client, owner, name):
    session = ChatSession.objects.create(owner=owner, name="keep")
    response = owner_client.put(f"/api/sessions/{session.pk}/rename", {"name": name}, format="json")
    assert response.status_code == 400
    assert "name" in response.json()["error"]["details"]
    assert ChatSession.objects.get(pk=session.pk).name == "keep"


def test_sessions_need_a_token(anon_client):
    assert anon_client.get("/api/sessions").status_code == 401
    response = anon_client.post(f"/api/sessions/{uuid.uuid4()}/chat", {"message": "hi"}, format="json")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"


def test_a_message_over_32000_characters_is_refused_before_any_stream(owner_client, owner):
    session = ChatSession.objects.create(owner=owner)
    response = owner_client.post(f"/api/sessions/{session.pk}/chat", {"message": "x" * 32_001}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "message_too_long"
    assert not ChatMessage.objects.filter(session=session).exists()


@pytest.mark.parametrize("body", [{}, {"message": ""}, {"message": 5, "attachments": "no"}])
def test_a_chat_request_without_a_message_is_invalid(owner_client, owner, body):
    session = ChatSession.objects.create(owner=owner)
    response = owner_client.post(f"/api/sessions/{session.pk}/chat", body, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"
    assert not ChatMessage.objects.filter(session=session).exists()


def test_unknown_attachments_are_refused_and_nothing_is_stored(owner_client, owner):
    session = ChatSession.objects.create(owner=owner)
    response = owner_client.post(f"/api/sessions/{session.pk}/chat",
                                 {"message": "look", "attachments": [str(uuid.uuid4())]}, format="json")
    assert response.status_code == 404  # ids do not leak: an unknown and another user's upload look alike
    assert "attachments" in response.json()["error"]["details"]
    assert not ChatMessage.objects.filter(session=session).exists()


def test_chat_only_accepts_post(owner_client, owner):
    session = ChatSession.objects.create(owner=owner)
    response = owner_client.get(f"/api/sessions/{session.pk}/chat")
    assert response.status_code == 405 and response["Allow"] == "POST, OPTIONS"
    assert response.json()["error"]["code"] == "method_not_allowed"
    described = owner_client.options(f"/api/sessions/{session.pk}/chat")
    assert described.status_code == 200 and described["Allow"] == "POST, OPTIONS"


@pytest.mark.parametrize("method", ["get", "options", "delete"])
def test_the_streaming_posts_ask_for_the_caller_before_the_method_as_drf_views_do(client, owner, method):
    session = ChatSession.objects.create(owner=owner)
    for path in (f"/api/sessions/{session.pk}/chat", f"/api/workflows/{uuid.uuid4()}/run"):
        response = getattr(client, method)(path)
        assert response.status_code == 401 and response.json()["error"]["code"] == "not_authenticated", path


def test_a_user_turn_left_without_a_reply_is_merged_with_the_next_one(owner):
    from sessions_app.history import to_agent_messages

    session = ChatSession.objects.create(owner=owner)
    message_append(session=session, role="user", content="first, then the client left")
    message_append(session=session, role="user", content="second try")
    messages = to_agent_messages(ChatMessage.objects.filter(session=session))
    assert [(m.role, m.content) for m in messages] == [("user", "first, then the client left\n\nsecond try")]


def test_a_form_encoded_chat_body_is_415(owner_client, owner):
    session = ChatSession.objects.create(owner=owner)
    response = owner_client.post(f"/api/sessions/{session.pk}/chat", "message=hi",
                                 content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"
    assert not ChatMessage.objects.filter(session=session).exists()


def test_a_misspelt_field_is_refused_naming_it_and_nothing_is_created(owner_client):
    before = ChatSession.objects.count()
    response = owner_client.post("/api/sessions", {"title": "x"}, format="json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "unknown_field"
    assert "title" in error["message"] and "name" in error["message"]
    assert error["details"] == {"title": ["Unknown field."]}
    assert ChatSession.objects.count() == before

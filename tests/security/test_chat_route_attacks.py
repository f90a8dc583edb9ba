"""The chat's newer routes (regenerate, stop, export, import, search, PATCH current) against another user's ids,
ids of the caller's other sessions, and API keys without the `api` scope the chat routes need."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from sessions_app import search
from sessions_app.models import ChatSession
from sessions_app.services import message_append
from tests.conftest import client_for

pytestmark = pytest.mark.django_db


def _session(owner, name: str, words: str) -> tuple[ChatSession, str, str]:
    session = ChatSession.objects.create(owner=owner, name=name)
    question = message_append(session=session, role="user", content=f"Tell me about {words}")
    reply = message_append(session=session, role="assistant", content=f"{words} are secret", status="streaming")
    return session, str(question.pk), str(reply.pk)


def _key(user, scopes: list[str]) -> APIClient:
    answer = client_for(user).post("/api/keys", {"name": "k", "scopes": scopes}, format="json")
    assert answer.status_code == 201, answer.content
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {answer.json()['key']}")
    return client


def test_a_message_of_the_callers_other_session_is_not_found_on_every_message_route(owner_client, owner):
    mine, _, _ = _session(owner, "Mine", "apples")
    _, other_question, other_reply = _session(owner, "Also mine", "pears")
    base = f"/api/sessions/{mine.pk}"
    assert owner_client.post(f"{base}/messages/{other_reply}/stop").status_code == 404
    assert owner_client.post(f"{base}/messages/{other_reply}/regenerate", {}, format="json").status_code == 404
    refused = owner_client.patch(base, {"current": other_question}, format="json")
    assert refused.status_code == 400 and list(refused.json()["error"]["details"]) == ["current"]
    assert owner_client.post(f"{base}/chat", {"message": "hi", "parent": other_reply}, format="json").status_code == 400
    assert ChatSession.objects.get(pk=mine.pk).messages.get(role="assistant").status == "streaming"


def test_another_users_reply_is_neither_stopped_nor_regenerated_through_the_callers_session(owner_client, owner,
                                                                                            other_user):
    mine, _, _ = _session(owner, "Mine", "apples")
    theirs, _, their_reply = _session(other_user, "Theirs", "pears")
    for base in (f"/api/sessions/{mine.pk}", f"/api/sessions/{theirs.pk}"):
        assert owner_client.post(f"{base}/messages/{their_reply}/stop").status_code == 404
        assert owner_client.post(f"{base}/messages/{their_reply}/regenerate", {}, format="json").status_code == 404
    assert theirs.messages.get(role="assistant").status == "streaming"


def test_search_never_answers_another_users_session_even_one_the_index_leaves_out(owner, django_user_model):
    beyond = django_user_model.objects.create_user(id=search.OWNER_LIMIT, username="beyond", password="x" * 12)
    _session(beyond, "Pears of beyond", "pears")
    _session(owner, "Apples", "apples")
    for user, word in ((owner, "pears"), (owner, "beyond"), (beyond, "apples")):
        found = client_for(user).get(f"/api/sessions?q={word}")
        assert found.status_code == 200 and found.json()["results"] == [], (user.username, word)
    assert [r["name"] for r in client_for(owner).get("/api/sessions?q=apples").json()["results"]] == ["Apples"]


@pytest.mark.parametrize("q", ["\" OR 1=1 --", "pears*", "NEAR(pears apples)", "') OR owner_id <> 0 --", "x' & '"])
def test_search_syntax_in_q_finds_only_the_callers_words(owner_client, owner, other_user, q):
    _session(other_user, "Theirs", "pears apples")
    response = owner_client.get("/api/sessions", {"q": q})
    assert response.status_code == 200 and response.json()["results"] == []


# Committed as it goes: regenerate is an async view, which authenticates on a database thread of its own; inside
# the test's one transaction that thread would wait on the audit row the earlier refusals wrote (PostgreSQL).
@pytest.mark.django_db(transaction=True)
def test_a_key_without_the_api_scope_is_refused_on_every_new_chat_route(owner):
    session, _, reply = _session(owner, "Mine", "apples")
    base = f"/api/sessions/{session.pk}"
    calls = [("get", "/api/sessions?q=apples", None), ("get", f"{base}/export", None),
             ("post", "/api/sessions/import", {"format": "agentsite.chat", "version": 1, "messages": []}),
             ("post", f"{base}/messages/{reply}/stop", None), ("post", f"{base}/messages/{reply}/regenerate", {}),
             ("patch", base, {"pinned": True})]
    narrow = _key(owner, ["v1", "mcp"])
    for method, path, body in calls:
        response = getattr(narrow, method)(path, body, format="json")
        assert response.status_code == 403 and response.json()["error"]["code"] == "key_scope", (method, path)
    assert session.messages.get(role="assistant").status == "streaming"
    assert not ChatSession.objects.get(pk=session.pk).pinned
    wide = _key(owner, ["api"])
    assert wide.get("/api/sessions?q=apples").json()["results"][0]["name"] == "Mine"
    assert wide.get(f"{base}/export").status_code == 200


def test_a_session_given_to_another_user_in_the_django_admin_is_never_found_by_its_former_owner(owner, other_user):
    session, _, _ = _session(owner, "Handed over", "pears")
    session.owner = other_user
    session.save()  # as the Django admin's change form saves it
    message_append(session=session, role="user", content="quince from the new owner")
    for word in ("pears", "quince", "handed"):
        assert client_for(owner).get("/api/sessions", {"q": word}).json()["results"] == [], word
    found = client_for(other_user).get("/api/sessions", {"q": "quince"}).json()["results"]
    assert [result["id"] for result in found] in ([], [str(session.pk)])  # SQLite leaves it out of the index

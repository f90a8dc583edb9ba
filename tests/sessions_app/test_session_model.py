"""A chat session's `model` (issue 26): chosen on create or PATCH, checked against the model catalogue (unknown:
400 naming it), and used for the session's turns through the router; a turn may name its own."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from sessions_app.models import ChatMessage, ChatSession
from sessions_app.services import session_create
from sessions_app.turns import turn_start
from tests.catalogue import two_upstreams, use_catalogue
from tests.fakes.llm import Text

pytestmark = pytest.mark.django_db


@pytest.fixture
def catalogue(fake_openai):
    with use_catalogue(two_upstreams(fake_openai.base_url, fake_openai.base_url)) as settings:
        yield settings


def test_a_session_is_created_and_patched_with_a_model_of_the_catalogue(owner_client, catalogue):
    created = owner_client.post("/api/sessions", {"name": "s", "model": "smart"}, format="json")
    assert created.status_code == 201 and created.json()["model"] == "smart"
    session_id = created.json()["id"]
    patched = owner_client.patch(f"/api/sessions/{session_id}", {"model": "hosted/big"}, format="json")
    assert patched.status_code == 200 and patched.json()["model"] == "hosted/big"
    assert owner_client.get(f"/api/sessions/{session_id}").json()["model"] == "hosted/big"
    renamed = owner_client.patch(f"/api/sessions/{session_id}", {"name": "renamed"}, format="json").json()
    assert (renamed["name"], renamed["model"]) == ("renamed", "hosted/big")  # a field not given is kept
    cleared = owner_client.patch(f"/api/sessions/{session_id}", {"model": ""}, format="json")
    assert cleared.status_code == 200 and cleared.json()["model"] == ""
    assert owner_client.get("/api/sessions").json()["results"][0]["model"] == ""
    assert owner_client.post("/api/sessions", {}, format="json").json()["model"] == ""


@pytest.mark.parametrize("model", ["nope", "hosted/small", "elsewhere/big", "x" * 301])
def test_an_unknown_model_is_refused_with_a_400_naming_it(owner_client, owner, catalogue, model):
    created = owner_client.post("/api/sessions", {"model": model}, format="json")
    assert created.status_code == 400 and created.json()["error"]["code"] == "invalid"
    assert "model" in created.json()["error"]["details"]
    if len(model) <= 300:
        assert repr(model) in created.json()["error"]["message"]
    assert not ChatSession.objects.exists()
    session = ChatSession.objects.create(owner=owner, name="keep")
    patched = owner_client.patch(f"/api/sessions/{session.pk}", {"model": model, "name": "changed"}, format="json")
    assert patched.status_code == 400
    session.refresh_from_db()
    assert (session.model, session.name) == ("", "keep")


def test_another_users_session_cannot_be_patched(other_client, owner, catalogue):
    session = ChatSession.objects.create(owner=owner, name="mine")
    assert other_client.patch(f"/api/sessions/{session.pk}", {"model": "smart"}, format="json").status_code == 404


@pytest.mark.django_db(transaction=True)
async def test_a_turn_uses_the_sessions_model_and_a_request_may_name_another(owner, fake_openai, catalogue):
    session = await sync_to_async(session_create)(owner=owner, name="t", model="hosted/big")
    fake_openai.script(Text("from big"), Text("from small"), Text("default"))
    for model, expected in ((None, "big"), ("local/small", "small")):
        turn = await turn_start(owner=owner, session_id=session.pk, message="hi", model=model)
        assert [event.type async for event in turn.events()][-1] == "done"
        assert fake_openai.bodies()[-1]["model"] == expected
    await sync_to_async(ChatSession.objects.filter(pk=session.pk).update)(model="")
    turn = await turn_start(owner=owner, session_id=session.pk, message="hi")
    assert [event.type async for event in turn.events()][-1] == "done"
    assert fake_openai.bodies()[-1]["model"] == "small"  # the default connection's first model


@pytest.mark.django_db(transaction=True)
async def test_an_unknown_model_fails_the_turn_before_anything_is_stored(owner, catalogue):
    from agentsite.core.errors import AppError

    session = await sync_to_async(session_create)(owner=owner, name="t")
    with pytest.raises(AppError) as refused:
        await turn_start(owner=owner, session_id=session.pk, message="hi", model="gone/model")
    assert (refused.value.status, refused.value.code) == (400, "invalid") and "'gone/model'" in refused.value.message
    # A stored model whose connection went away since: 404 naming it, nothing stored either.
    await sync_to_async(ChatSession.objects.filter(pk=session.pk).update)(model="retired/model")
    with pytest.raises(AppError) as gone:
        await turn_start(owner=owner, session_id=session.pk, message="hi")
    assert (gone.value.status, gone.value.code) == (404, "model_not_found") and "'retired/model'" in gone.value.message
    assert not await sync_to_async(ChatMessage.objects.filter(session_id=session.pk).exists)()


def test_the_chat_endpoint_refuses_an_unknown_model_before_the_stream(owner_client, owner, catalogue):
    session = ChatSession.objects.create(owner=owner, name="t")
    answer = owner_client.post(f"/api/sessions/{session.pk}/chat", {"message": "hi", "model": "nope"}, format="json")
    assert answer.status_code == 400 and "'nope'" in answer.json()["error"]["message"]
    assert not ChatMessage.objects.filter(session=session).exists()

"""A chat session runs a named agent (issue 45, items 4 and 5): `POST /api/sessions {agent}`, `PATCH {agent}`;
each turn sends the agent's instructions first, exactly its allowlisted tools and its collections' passages (read
with the agent owner's rights, never the caller's own private ones); a slug the caller may not use is 404; an
agent the owner lost since refuses the turn before anything is stored.

The chat is driven in-process through the full ASGI stack (agentsite.asgi), against the fake upstream LLM, whose
recorded requests are the witness. The helpers here (`point_at`, `make_agent`, `assert_agent_reached`) serve the
scheduler's and workflows' agent tests too."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from asgiref.sync import sync_to_async

from accounts.tokens import token_pair_for
from agentsite.core.errors import AppError
from organisation.models import Group, Membership
from sessions_app.models import ChatMessage, ChatSession
from sessions_app.services import session_create
from sessions_app.turns import turn_start
from tests.conftest import client_for
from tests.fakes.llm import Call, Text, ToolCalls

pytestmark = pytest.mark.django_db(transaction=True)

INSTRUCTIONS = "You are the Hall Seven support agent. Answer from the handbook, briefly."
PASSAGE = "Handbook: the zorblat reactor of Hall Seven is cooled with quintessence brine at minus forty degrees."
PRIVATE = "Private notebook: my zorblat reactor of Hall Seven is cooled with pink lemonade, do not tell anyone."
QUESTION = "How is the zorblat reactor of Hall Seven cooled?"
TOOL = "web_fetch"  # the agent's one allowed tool (a built-in)
UNLISTED = "web_search"  # a built-in the agent does not allow


# --- helpers (also used by tests/scheduler/test_agents.py and tests/workflows/test_agents.py) --------------------

def point_at(fake_openai: Any) -> None:
    """The deployment's connection is the fake upstream (model `m`), with the knowledge base on."""
    from catalogue.services import config_update

    config_update(changes={"provider": "openai", "base_url": fake_openai.base_url, "api_key": "sk-x", "model": "m",
                           "kb_enabled": True})


def make_agent(owner: Any, slug: str = "support") -> Any:
    """An agent of `owner` with INSTRUCTIONS, the one tool TOOL and one collection of the owner's holding PASSAGE."""
    from agents_app.services import agent_create
    from knowledge.services import collection_create, document_ingest

    collection = collection_create(owner_id=owner.pk, name=f"{slug} handbook")
    document_ingest(owner_id=owner.pk, filename="handbook.txt", content=PASSAGE, collection=collection)
    return agent_create(owner=owner, data={"slug": slug, "name": "Support", "instructions": INSTRUCTIONS,
                                           "tools": [TOOL], "knowledge": [str(collection.pk)]})


def share_with_group(agent: Any, member: Any, role: str = "viewer") -> Group:
    """`agent` shared (through its owner's PUT .../access) with a new group whose one member is `member`."""
    group = Group.objects.create(name=f"{agent.slug}-readers")
    Membership.objects.create(group=group, user=member)
    shared = client_for(agent.owner).put(f"/api/agents/{agent.pk}/access", {
        "visibility": "shared", "grants": [{"group": group.pk, "role": role}]}, format="json")
    assert shared.status_code == 200, shared.content
    return group


def system_text(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"])


def tool_names(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools") or []]


def assert_agent_reached(body: dict[str, Any]) -> None:
    """The upstream request carries the agent: its instructions as the first system message, with the
    collection's passage in that context, and exactly its one tool."""
    assert body["messages"][0]["role"] == "system", body["messages"]
    assert system_text(body).startswith(INSTRUCTIONS), system_text(body)
    assert PASSAGE in system_text(body)
    assert tool_names(body) == [TOOL]


def asgi_client() -> httpx2.AsyncClient:
    from agentsite.asgi import application

    transport = httpx2.ASGITransport(app=application, client=("127.0.0.1", 40000))
    return httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=10)


def sse(body: str) -> list[tuple[str, Any]]:
    found = []
    for block in body.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":"))
        if "data" in lines:
            found.append((lines.get("event", "message"), json.loads(lines["data"])))
    return found


def bearer(user: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {token_pair_for(user)['token']}"}


async def api(user: Any, method: str, path: str, body: Any = None) -> Any:
    """A dashboard-token request of `user` from async code (the test client is sync)."""
    def call() -> Any:
        return getattr(client_for(user), method)(path, body, format="json")

    return await sync_to_async(call)()


async def chat(user: Any, session_id: Any, message: str = QUESTION) -> httpx2.Response:
    headers = await sync_to_async(bearer)(user)
    async with asgi_client() as client:
        return await client.post(f"/api/sessions/{session_id}/chat", json={"message": message}, headers=headers)


@pytest.fixture
def team(django_user_model, fake_openai):
    """alice owns the agent `support`; bob is in no group yet; carol is another user."""
    point_at(fake_openai)
    alice = django_user_model.objects.create_user("alice", password="x-correct-horse-1")
    bob = django_user_model.objects.create_user("bob", password="x-correct-horse-1")
    carol = django_user_model.objects.create_user("carol", password="x-correct-horse-1")
    return {"alice": alice, "bob": bob, "carol": carol, "agent": make_agent(alice)}


# --- the session resource ------------------------------------------------------------------------------------

def test_a_session_is_created_and_patched_with_an_agent_and_says_default_when_it_names_none(team):
    api = client_for(team["alice"])
    plain = api.post("/api/sessions", {"name": "plain"}, format="json")
    assert plain.status_code == 201 and plain.json()["agent"] == "default"
    assert ChatSession.objects.get(pk=plain.json()["id"]).agent_id is None
    created = api.post("/api/sessions", {"name": "help", "agent": "support"}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["agent"] == "support"
    session_id = created.json()["id"]
    assert api.get(f"/api/sessions/{session_id}").json()["agent"] == "support"
    listed = {row["id"]: row["agent"] for row in api.get("/api/sessions").json()["results"]}
    assert listed == {plain.json()["id"]: "default", session_id: "support"}
    patched = api.patch(f"/api/sessions/{plain.json()['id']}", {"agent": "support"}, format="json")
    assert patched.status_code == 200 and patched.json()["agent"] == "support"
    back = api.patch(f"/api/sessions/{session_id}", {"agent": "default", "name": "renamed"}, format="json").json()
    assert (back["agent"], back["name"]) == ("default", "renamed")


def test_a_deleted_agent_leaves_its_sessions_on_the_default_agent(team):
    session = session_create(owner=team["alice"], name="s", agent="support")
    assert session.agent_id == team["agent"].pk
    from agents_app.services import agent_delete

    agent_delete(agent=team["agent"])
    assert client_for(team["alice"]).get(f"/api/sessions/{session.pk}").json()["agent"] == "default"


@pytest.mark.parametrize("slug", ["support", "nope", "support@1", "UPPER"])
def test_an_agent_the_caller_may_not_use_is_404_naming_it_and_nothing_changes(team, slug):
    api = client_for(team["bob"])  # not in any group: alice's private agent is not his
    created = api.post("/api/sessions", {"name": "x", "agent": slug}, format="json")
    assert created.status_code == 404, created.content
    error = created.json()["error"]
    assert error["code"] == "not_found" and repr(slug) in error["message"] and "agent" in error["details"]
    assert not ChatSession.objects.filter(owner=team["bob"]).exists()
    mine = api.post("/api/sessions", {"name": "keep"}, format="json").json()
    patched = api.patch(f"/api/sessions/{mine['id']}", {"agent": slug, "name": "changed"}, format="json")
    assert patched.status_code == 404 and "agent" in patched.json()["error"]["details"]
    stored = ChatSession.objects.get(pk=mine["id"])
    assert (stored.agent_id, stored.name) == (None, "keep")


def test_a_malformed_agent_field_is_400_naming_it(team):
    api = client_for(team["alice"])
    for value in ("", 7, "x" * 65, None):
        answer = api.post("/api/sessions", {"agent": value}, format="json")
        assert answer.status_code == 400 and "agent" in answer.json()["error"]["details"], (value, answer.content)


# --- a turn of the agent ---------------------------------------------------------------------------------------

async def test_the_chat_sends_the_agents_instructions_one_tool_and_its_knowledge(team, fake_openai):
    session = await sync_to_async(session_create)(owner=team["alice"], name="s", agent="support")
    fake_openai.script(Text("Quintessence brine."))
    answer = await chat(team["alice"], session.pk)
    assert answer.status_code == 200
    events = sse(answer.text)
    assert [name for name, _ in events][-1] == "done", events
    [body] = fake_openai.bodies()
    assert_agent_reached(body)
    assert body["messages"][-1] == {"role": "user", "content": QUESTION}
    assert body["model"] == "m"  # the agent names no model: the deployment's
    # The reply's sources are the agent's collection's chunk.
    assert [source["document"]["filename"] for source in events[-1][1]["sources"]] == ["handbook.txt"]


async def test_the_default_agent_keeps_the_deployments_prompt_and_every_tool(team, fake_openai):
    """Control: the same question in a session with no agent reaches upstream without the named agent."""
    session = await sync_to_async(session_create)(owner=team["alice"], name="plain")
    fake_openai.script(Text("ok"))
    assert sse((await chat(team["alice"], session.pk)).text)[-1][0] == "done"
    [body] = fake_openai.bodies()
    assert not system_text(body).startswith(INSTRUCTIONS) and PASSAGE not in system_text(body)
    assert len(tool_names(body)) > 1  # the config's `*`


async def test_a_call_to_a_tool_outside_the_allowlist_is_refused_and_recorded_as_an_error_step(team, fake_openai):
    session = await sync_to_async(session_create)(owner=team["alice"], name="s", agent="support")
    fake_openai.script(ToolCalls([Call(UNLISTED, {"query": "zorblat"}, id="call_1")]), Text("I cannot search."))
    events = sse((await chat(team["alice"], session.pk)).text)
    names = [name for name, _ in events]
    assert names[:3] == ["start", "tool_call", "tool_result"] and names[-1] == "done", events
    result = events[2][1]
    assert result["is_error"] is True and result["name"] == UNLISTED
    assert f"There is no tool named {UNLISTED!r}" in result["content"] and TOOL in result["content"]
    first, second = fake_openai.bodies()
    assert tool_names(first) == tool_names(second) == [TOOL]
    tool_message = next(m for m in second["messages"] if m["role"] == "tool")
    assert result["content"] in tool_message["content"]
    # The session's messages show the refused step on the reply.
    messages = await api(team["alice"], "get", f"/api/sessions/{session.pk}/messages")
    reply = messages.json()["results"][-1]
    assert reply["status"] == "complete" and reply["content"] == "I cannot search."
    assert [(call["name"], call["result"]["is_error"]) for call in reply["tool_calls"]] == [(UNLISTED, True)]
    assert "There is no tool named" in reply["tool_calls"][0]["result"]["content"]


async def test_the_sessions_model_and_a_turns_model_override_the_agents_model(team, fake_openai):
    from catalogue.models import Connection
    from catalogue.selectors import config_cache_clear

    await sync_to_async(Connection.objects.update)(models=["m", "m2", "m3"])
    await sync_to_async(config_cache_clear)()
    session = await sync_to_async(session_create)(owner=team["alice"], name="s", agent="support", model="m2")
    fake_openai.script(Text("one"), Text("two"))
    turn = await turn_start(owner=team["alice"], session_id=session.pk, message=QUESTION)
    assert [event.type async for event in turn.events()][-1] == "done"
    turn = await turn_start(owner=team["alice"], session_id=session.pk, message=QUESTION, model="m3")
    assert [event.type async for event in turn.events()][-1] == "done"
    first, second = fake_openai.bodies()
    assert (first["model"], second["model"]) == ("m2", "m3")
    assert_agent_reached(first)
    assert system_text(second).startswith(INSTRUCTIONS) and tool_names(second) == [TOOL]


# --- shared with a group ---------------------------------------------------------------------------------------

async def test_a_group_member_chats_with_the_shared_agent_on_its_knowledge_never_their_own(team, fake_openai):
    from knowledge.services import document_ingest

    bob = team["bob"]
    await sync_to_async(share_with_group)(team["agent"], bob)
    await sync_to_async(document_ingest)(owner_id=bob.pk, filename="notes.txt", content=PRIVATE)  # his personal
    created = await api(bob, "post", "/api/sessions", {"agent": "support", "name": "Brine"})  # named: no title asked
    assert created.status_code == 201 and created.json()["agent"] == "support"
    fake_openai.script(Text("Brine."), Text("Lemonade."))
    assert sse((await chat(bob, created.json()["id"])).text)[-1][0] == "done"
    agents_turn = fake_openai.bodies()[-1]
    assert_agent_reached(agents_turn)  # alice's collection, searched with her rights for bob
    assert PRIVATE not in system_text(agents_turn)
    # Control: the same question on the default agent does find bob's own notes (so the query matches them).
    plain = await sync_to_async(session_create)(owner=bob, name="plain")
    assert sse((await chat(bob, plain.pk)).text)[-1][0] == "done"
    assert PRIVATE in system_text(fake_openai.bodies()[-1])
    assert PASSAGE not in system_text(fake_openai.bodies()[-1])


def test_a_non_member_gets_404_for_the_shared_agent(team):
    share_with_group(team["agent"], team["bob"])
    refused = client_for(team["carol"]).post("/api/sessions", {"agent": "support"}, format="json")
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found"
    assert client_for(team["bob"]).post("/api/sessions", {"agent": "support"}, format="json").status_code == 201


async def test_a_member_who_leaves_the_group_is_refused_the_next_turn_before_anything_is_stored(team, fake_openai):
    bob = team["bob"]
    group = await sync_to_async(share_with_group)(team["agent"], bob)
    session = await sync_to_async(session_create)(owner=bob, name="s", agent="support")
    fake_openai.script(Text("Brine."))
    assert sse((await chat(bob, session.pk)).text)[-1][0] == "done"
    await sync_to_async(Membership.objects.filter(group=group, user=bob).delete)()

    refused = await chat(bob, session.pk, "and again?")
    assert refused.status_code == 404, refused.text
    error = refused.json()["error"]
    assert error["code"] == "not_found" and "'support'" in error["message"] and "PATCH" in error["message"]
    assert "agent" in error["details"]
    with pytest.raises(AppError) as direct:
        await turn_start(owner=bob, session_id=session.pk, message="and again?")
    assert (direct.value.status, direct.value.code) == (404, "not_found")
    contents = await sync_to_async(list)(ChatMessage.objects.filter(session=session).values_list("content", flat=True))
    assert "and again?" not in contents and len(contents) == 2
    assert len(fake_openai.bodies()) == 1
    # Choosing another agent (PATCH) mends the session.
    patched = await api(bob, "patch", f"/api/sessions/{session.pk}", {"agent": "default"})
    assert patched.status_code == 200
    fake_openai.script(Text("Default here."))
    assert sse((await chat(bob, session.pk, "and again?")).text)[-1][0] == "done"


async def test_an_agent_made_private_again_refuses_the_owners_session_of_another_user(team, fake_openai):
    """The agent's owner may always use it; a grant withdrawn through PUT .../access refuses the member."""
    await sync_to_async(share_with_group)(team["agent"], team["bob"])
    mine = await sync_to_async(session_create)(owner=team["alice"], name="a", agent="support")
    his = await sync_to_async(session_create)(owner=team["bob"], name="b", agent="support")
    private = await api(team["alice"], "put", f"/api/agents/{team['agent'].pk}/access",
                        {"visibility": "private", "grants": []})
    assert private.status_code == 200, private.content
    assert (await chat(team["bob"], his.pk)).status_code == 404
    fake_openai.script(Text("still mine"))
    assert sse((await chat(team["alice"], mine.pk)).text)[-1][0] == "done"

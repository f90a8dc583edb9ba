"""Named agents through the /v1 doors (issue 45, items 4 and 5), on a real daphne server with the official
`openai` and `anthropic` SDKs: `model: "agent:helper"` runs the agent with its own instructions (before the
caller's system message), its one allowed tool, and its collection's passage in context, on every door; a call
of a tool it does not list is refused; who may use it is its access rule (404 `model_not_found` to anyone else,
on every door) and their groups' model lists (403 `model_not_allowed`); `agent:helper@1` runs version 1.
The fake upstream's recorded requests are the witness."""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.compat import agent_world
from tests.compat.agent_world import (
    INSTRUCTIONS,
    MEMBER_PASSAGE,
    MODEL,
    PASSAGE,
    QUESTION,
    TOOL,
    World,
    assert_the_agent_was_sent,
)
from tests.e2e import server_with_fake_upstream
from tests.fakes.llm import Call, Text, ToolCalls

pytestmark = pytest.mark.e2e

CALLER_SYSTEM = "Keep it under twenty words."
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                            "parameters": {"type": "object",
                                                           "properties": {"city": {"type": "string"}}}}}
PAGE = "<html><head><title>Tides</title></head><body><p>High tide at 06:12 in the pelican harbour.</p></body></html>"


@pytest.fixture(scope="module")
def world(fake_openai_server):
    server, admin = server_with_fake_upstream(fake_openai_server)
    try:
        yield agent_world.build(server.base_url, admin)
    finally:
        server.stop()


def openai_client(world: World, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{world.base_url}/v1", api_key=key, max_retries=0)


def anthropic_client(world: World, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=world.base_url, api_key=key, max_retries=0)


def ask(text: str = QUESTION) -> list[dict]:
    return [{"role": "system", "content": CALLER_SYSTEM}, {"role": "user", "content": text}]


# --- the agent's instructions, tool and knowledge, on every door ---------------------------------------------

def test_chat_completions_whole_runs_the_agent_with_its_instructions_tool_and_knowledge(world, fake_openai):
    fake_openai.script(Text("Le code est heron-7731."))
    client = openai_client(world, world.member.key)
    # The caller's own tools are not the agent's: the upstream gets the agent's one tool only.
    completion = client.chat.completions.create(model=MODEL, messages=ask(), tools=[WEATHER])
    assert completion.choices[0].message.content == "Le code est heron-7731."
    assert completion.model == MODEL
    [sent] = fake_openai.bodies()
    assert_the_agent_was_sent(sent, caller_system=CALLER_SYSTEM)
    assert sent["messages"][-1] == {"role": "user", "content": QUESTION}


def test_the_default_agent_searches_the_callers_own_collection_which_a_named_agent_does_not(world, fake_openai):
    # The witness that a named agent's context leaves the member's passage out by choice: `agent` (the agent
    # `default`) finds it for the same question.
    fake_openai.script(Text("gull-0042"), Text("heron-7731"))
    client = openai_client(world, world.member.key)
    client.chat.completions.create(model="agent", messages=ask())
    client.chat.completions.create(model=MODEL, messages=ask())
    default, named = fake_openai.bodies()
    assert MEMBER_PASSAGE in agent_world.first_system(default) and PASSAGE not in str(default["messages"])
    assert_the_agent_was_sent(named, caller_system=CALLER_SYSTEM)


def test_chat_completions_streamed_runs_the_agent(world, fake_openai):
    fake_openai.script(Text("Le code est heron-7731.", pieces=["Le code ", "est ", "heron-7731."]))
    client = openai_client(world, world.member.key)
    chunks = list(client.chat.completions.create(model=MODEL, messages=ask(), stream=True))
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices) == \
        "Le code est heron-7731."
    [sent] = fake_openai.bodies()
    assert_the_agent_was_sent(sent, caller_system=CALLER_SYSTEM)


@pytest.mark.parametrize("stream", [False, True])
def test_responses_runs_the_agent_before_the_callers_instructions(world, fake_openai, stream):
    fake_openai.script(Text("Le code est heron-7731."))
    client = openai_client(world, world.member.key)
    if stream:
        events = list(client.responses.create(model=MODEL, instructions=CALLER_SYSTEM, input=QUESTION, stream=True))
        text = next(event.response.output_text for event in events if event.type == "response.completed")
    else:
        text = client.responses.create(model=MODEL, instructions=CALLER_SYSTEM, input=QUESTION).output_text
    assert text == "Le code est heron-7731."
    [sent] = fake_openai.bodies()
    assert_the_agent_was_sent(sent, caller_system=CALLER_SYSTEM)


@pytest.mark.parametrize("stream", [False, True])
def test_messages_runs_the_agent_before_the_callers_system(world, fake_openai, stream):
    fake_openai.script(Text("Le code est heron-7731."))
    client = anthropic_client(world, world.member.key)
    request = {"model": MODEL, "max_tokens": 200, "system": CALLER_SYSTEM,
               "messages": [{"role": "user", "content": QUESTION}]}
    if stream:
        with client.messages.stream(**request) as events:
            text = events.get_final_text()
    else:
        text = client.messages.create(**request).content[0].text
    assert text == "Le code est heron-7731."
    [sent] = fake_openai.bodies()
    assert_the_agent_was_sent(sent, caller_system=CALLER_SYSTEM)
    assert sent["max_tokens"] == 200


def test_the_agents_tool_runs_inside_the_server(world, fake_openai, fake_web):
    fake_web.page("/tides", PAGE)
    fake_openai.script(ToolCalls([Call(TOOL, {"url": fake_web.url("/tides"), "format": "text"}, id="call_t")]),
                       Text("Marée haute à 06:12."))
    completion = openai_client(world, world.member.key).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "When is high tide?"}])
    assert completion.choices[0].message.content == "Marée haute à 06:12."
    assert completion.choices[0].message.tool_calls is None  # the client sees the reply, not the agent's calls
    first, second = fake_openai.bodies()
    assert [tool["function"]["name"] for tool in second["tools"]] == [TOOL]
    result = next(message for message in second["messages"] if message["role"] == "tool")
    assert result["tool_call_id"] == "call_t" and "High tide at 06:12" in result["content"]


def test_a_call_of_a_tool_the_agent_does_not_list_is_refused(world, fake_openai):
    # web_search exists and the member could use it elsewhere; the agent lists web_fetch only.
    fake_openai.script(ToolCalls([Call("web_search", {"query": "pelican"}, id="call_x")]), Text("Je ne peux pas."))
    completion = openai_client(world, world.member.key).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Search the web for pelicans."}])
    assert completion.choices[0].message.content == "Je ne peux pas."
    first, second = fake_openai.bodies()
    result = next(message for message in second["messages"] if message["role"] == "tool")
    assert result["tool_call_id"] == "call_x"
    assert "There is no tool named 'web_search' here (tools: web_fetch)" in result["content"]


# --- who may use it ------------------------------------------------------------------------------------------

def test_a_member_of_the_group_sees_it_and_may_not_change_it(world):
    client = openai_client(world, world.member.key)
    assert MODEL in [model.id for model in client.models.list()]
    assert client.models.retrieve(MODEL).id == MODEL
    assert client.models.retrieve(f"{MODEL}@1").id == f"{MODEL}@1"
    refused = world.call("PATCH", f"/api/agents/{world.agent_id}", world.member.headers,
                         {"instructions": "Be rude."}, expect=403)
    assert refused.json()["error"]["code"] == "forbidden"


def test_a_non_member_gets_404_model_not_found_from_every_door(world, fake_openai):
    client = openai_client(world, world.outsider.key)
    assert MODEL not in [model.id for model in client.models.list()]
    for retrieve in (MODEL, f"{MODEL}@1"):
        with pytest.raises(openai.NotFoundError) as caught:
            client.models.retrieve(retrieve)
        assert caught.value.code == "model_not_found"
    for stream in (False, True):
        with pytest.raises(openai.NotFoundError) as caught:
            client.chat.completions.create(model=MODEL, messages=ask(), stream=stream)
        assert caught.value.code == "model_not_found" and MODEL in caught.value.message
        with pytest.raises(openai.NotFoundError) as caught:
            client.responses.create(model=MODEL, input=QUESTION, stream=stream)
        assert caught.value.code == "model_not_found"
        with pytest.raises(anthropic.NotFoundError) as refused:
            anthropic_client(world, world.outsider.key).messages.create(
                model=MODEL, max_tokens=50, stream=stream, messages=[{"role": "user", "content": QUESTION}])
        assert refused.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.NotFoundError):
        anthropic_client(world, world.outsider.key).messages.count_tokens(
            model=MODEL, messages=[{"role": "user", "content": QUESTION}])
    # The same answer as for an agent that does not exist; and the outsider's pin of a real version too.
    with pytest.raises(openai.NotFoundError) as ghost:
        client.chat.completions.create(model="agent:ghost", messages=ask())
    with pytest.raises(openai.NotFoundError) as pinned:
        client.chat.completions.create(model=f"{MODEL}@1", messages=ask())
    assert caught.value.status_code == ghost.value.status_code == pinned.value.status_code == 404
    assert world.call("PATCH", f"/api/agents/{world.agent_id}", world.outsider.headers,
                      {"instructions": "Be rude."}).status_code == 404
    assert fake_openai.bodies() == []  # nothing reached the upstream


def test_an_anonymous_caller_cannot_use_it(world, fake_openai):
    # compat_auth `local`: a placeholder key from loopback is an anonymous caller, who holds no role on it.
    client = openai_client(world, "placeholder")
    assert MODEL not in [model.id for model in client.models.list()]
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model=MODEL, messages=ask())
    assert fake_openai.bodies() == []


def test_a_groups_model_list_decides_too(world, fake_openai):
    client = openai_client(world, world.intern.key)
    # `interns` allows ["fast"]: the intern may use the agent (team's grant) but not its model name.
    assert MODEL not in [model.id for model in client.models.list()]
    with pytest.raises(openai.PermissionDeniedError) as refused:
        client.chat.completions.create(model=MODEL, messages=ask())
    assert refused.value.code == "model_not_allowed"
    with pytest.raises(openai.PermissionDeniedError):
        client.models.retrieve(MODEL)
    with pytest.raises(anthropic.PermissionDeniedError):
        anthropic_client(world, world.intern.key).messages.create(
            model=MODEL, max_tokens=50, messages=[{"role": "user", "content": QUESTION}])
    assert fake_openai.bodies() == []
    try:
        # agent:* allows every agent; the agent's own model must be allowed too (checked as every call is).
        world.call("PATCH", f"/api/groups/{world.interns_id}", world.admin,
                   {"models": ["agent:*", "default/fake-model"]}, expect=200)
        fake_openai.script(Text("Le code est heron-7731."))
        completion = client.chat.completions.create(model=MODEL, messages=ask())
        assert completion.choices[0].message.content == "Le code est heron-7731."
        assert MODEL in [model.id for model in client.models.list()]
        assert_the_agent_was_sent(fake_openai.bodies()[-1], caller_system=CALLER_SYSTEM)
        # agent:* without the agent's model: the agent is allowed, the call to its model is not.
        world.call("PATCH", f"/api/groups/{world.interns_id}", world.admin, {"models": ["agent:*"]}, expect=200)
        with pytest.raises(openai.PermissionDeniedError) as inner:
            client.chat.completions.create(model=MODEL, messages=ask())
        assert inner.value.code == "model_not_allowed" and "fake-model" in inner.value.message
    finally:
        world.call("PATCH", f"/api/groups/{world.interns_id}", world.admin, {"models": ["fast"]}, expect=200)


# --- versions ------------------------------------------------------------------------------------------------

def test_a_pinned_version_runs_its_own_instructions_after_an_edit(world, fake_openai):
    edited = "You are Helper. Answer in German."
    world.call("PATCH", f"/api/agents/{world.agent_id}", world.author.headers, {"instructions": edited}, expect=200)
    try:
        fake_openai.script(Text("v1"), Text("latest"), Text("v1 again"))
        client = openai_client(world, world.member.key)
        assert client.chat.completions.create(model=f"{MODEL}@1", messages=ask()).model == f"{MODEL}@1"
        client.chat.completions.create(model=MODEL, messages=ask())
        list(client.chat.completions.create(model=f"{MODEL}@1", messages=ask(), stream=True))
        pinned, latest, pinned_streamed = fake_openai.bodies()
        assert agent_world.first_system(pinned).startswith(INSTRUCTIONS)
        assert agent_world.first_system(latest).startswith(edited)
        assert agent_world.first_system(pinned_streamed).startswith(INSTRUCTIONS)
        assert PASSAGE in agent_world.first_system(pinned)  # the pinned version's knowledge, too
        with pytest.raises(openai.NotFoundError) as missing:
            client.chat.completions.create(model=f"{MODEL}@9", messages=ask())
        assert missing.value.code == "model_not_found"
    finally:
        world.call("PATCH", f"/api/agents/{world.agent_id}", world.author.headers,
                   {"instructions": INSTRUCTIONS}, expect=200)

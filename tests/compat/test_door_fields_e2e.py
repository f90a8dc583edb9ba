"""The Responses and Messages doors' own fields reach the upstream, translated or refused naming them, and the
upstream's log probabilities come back: a real daphne server in front of an OpenAI-format and an Anthropic-format
fake upstream, driven by the official SDKs (and the Agents SDK), with the fakes' request logs as the witness."""

from __future__ import annotations

import agents
import anthropic
import openai
import pytest
import requests
from openai import AsyncOpenAI

from tests.e2e import server_with_fake_upstream
from tests.fakes.llm import Text

pytestmark = pytest.mark.e2e

CLAUDE = "claude/claude-fake"
HELLO = [{"role": "user", "content": "hello"}]
UNKNOWN = {"chat_template_kwargs": {"enable_thinking": False}, "min_p": 0.05}
OPENAI_ONLY = {"prompt_cache_key": "conv-7", "safety_identifier": "user-hash-42"}


@pytest.fixture(scope="module")
def live(fake_openai_server, fake_anthropic_server):
    server, headers = server_with_fake_upstream(fake_openai_server)
    try:
        for name, provider, base_url, model, passthrough in (
                ("claude", "anthropic", fake_anthropic_server.base_url, "claude-fake", False),
                ("claudepass", "anthropic", fake_anthropic_server.base_url, "claude-fake", True),
                ("open", "openai", fake_openai_server.base_url, "fake-model", True)):
            made = requests.post(f"{server.base_url}/api/connections", headers=headers, timeout=10, json={
                "name": name, "provider": provider, "base_url": base_url, "api_key": "sk-fake-key-1",
                "models": [model], "passthrough": passthrough})
            assert made.status_code == 201, made.text
        agents.set_tracing_disabled(True)  # the SDK would send traces to api.openai.com
        yield server
    finally:
        server.stop()


@pytest.fixture
def oai(live, fake_openai, fake_anthropic):
    return openai.OpenAI(base_url=f"{live.base_url}/v1", api_key="placeholder", max_retries=0)


@pytest.fixture
def claude(live, fake_openai, fake_anthropic):
    return anthropic.Anthropic(base_url=live.base_url, api_key="placeholder", max_retries=0)


def _sent(fake) -> dict:
    return fake.bodies()[-1]


def _respond(oai, stream: bool, **fields):
    reply = oai.responses.create(input="hello", store=False, stream=stream, **fields)
    return list(reply)[-1].response if stream else reply


# --- /v1/responses: reasoning, prompt_cache_key, safety_identifier ------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_effort_and_the_cache_and_safety_keys_reach_an_openai_upstream(oai, fake_openai, stream):
    fake_openai.script(Text("hi"))
    _respond(oai, stream, model="fake-model", reasoning={"effort": "low"}, **OPENAI_ONLY)
    sent = _sent(fake_openai)
    assert sent["reasoning_effort"] == "low" and "reasoning" not in sent
    assert {name: sent.get(name) for name in OPENAI_ONLY} == OPENAI_ONLY


@pytest.mark.parametrize("reasoning", [None, {}, {"effort": None, "summary": None}])
def test_an_empty_reasoning_asks_for_nothing_and_the_agent_takes_it(oai, fake_openai, reasoning):
    fake_openai.script(Text("hi"), Text("hi again"))
    extra = {"extra_body": {"reasoning": reasoning}}
    assert _respond(oai, False, model="fake-model", **extra).output_text == "hi"
    assert "reasoning_effort" not in _sent(fake_openai) and "reasoning" not in _sent(fake_openai)
    assert _respond(oai, False, model="agent", **extra).output_text == "hi again"


@pytest.mark.parametrize(("model", "fields", "param"), [
    ("agent", {"reasoning": {"effort": "low"}}, "reasoning.effort"),
    ("agent", {"prompt_cache_key": "conv-7"}, "prompt_cache_key"),
    ("agent", {"safety_identifier": "user-hash-42"}, "safety_identifier"),
    (CLAUDE, {"reasoning": {"effort": "high"}}, "reasoning.effort"),
    (CLAUDE, {"prompt_cache_key": "conv-7"}, "prompt_cache_key"),
    (CLAUDE, {"safety_identifier": "user-hash-42"}, "safety_identifier"),
    ("fake-model", {"reasoning": {"summary": "auto"}}, "reasoning.summary"),
])
def test_a_responses_field_the_target_cannot_carry_is_a_400_naming_it(oai, fake_openai, fake_anthropic, model,
                                                                      fields, param):
    with pytest.raises(openai.BadRequestError) as caught:
        oai.responses.create(model=model, input="hello", store=False, **fields)
    assert (caught.value.code, caught.value.param) == ("unsupported_parameter", param)
    assert fake_openai.bodies() == [] and fake_anthropic.bodies() == []


@pytest.mark.parametrize("door", ["responses", "chat_completions"])
def test_the_agents_sdk_with_its_default_settings_works_against_the_agent(live, fake_openai, door):
    client = AsyncOpenAI(base_url=f"{live.base_url}/v1", api_key="placeholder", max_retries=0)
    model_class = agents.OpenAIResponsesModel if door == "responses" else agents.OpenAIChatCompletionsModel
    agent = agents.Agent(name="plain", instructions="Be brief.", model=model_class(model="agent",
                                                                                    openai_client=client))
    fake_openai.script(Text("Hello from the agent."))
    assert agents.Runner.run_sync(agent, "Hello").final_output == "Hello from the agent."


def test_the_chat_door_carries_the_same_fields_to_an_openai_upstream_and_refuses_them_for_anthropic(
        oai, fake_openai, fake_anthropic):
    fake_openai.script(Text("hi"))
    oai.chat.completions.create(model="fake-model", messages=HELLO, reasoning_effort="low", **OPENAI_ONLY)
    sent = _sent(fake_openai)
    assert sent["reasoning_effort"] == "low" and {name: sent.get(name) for name in OPENAI_ONLY} == OPENAI_ONLY
    with pytest.raises(openai.BadRequestError) as caught:
        oai.chat.completions.create(model=CLAUDE, messages=HELLO, reasoning_effort="low")
    assert (caught.value.code, caught.value.param) == ("unsupported_parameter", "reasoning_effort")
    assert fake_anthropic.bodies() == []


# --- log probabilities ----------------------------------------------------------------------------------------

def _tokens(entries) -> str:
    return "".join(entry.token for entry in entries)


@pytest.mark.parametrize("stream", [False, True])
def test_chat_completions_relay_the_upstreams_logprobs(oai, fake_openai, stream):
    fake_openai.script(Text("The sky is blue today."))
    reply = oai.chat.completions.create(model="fake-model", messages=HELLO, logprobs=True, top_logprobs=1,
                                        stream=stream)
    if stream:
        entries = [entry for chunk in reply if chunk.choices and chunk.choices[0].logprobs
                   for entry in chunk.choices[0].logprobs.content]
    else:
        entries = reply.choices[0].logprobs.content
    assert _tokens(entries) == "The sky is blue today."
    assert all(entry.logprob == -0.25 and len(entry.top_logprobs) == 1 for entry in entries)
    assert (_sent(fake_openai)["logprobs"], _sent(fake_openai)["top_logprobs"]) == (True, 1)


def test_a_chat_completion_without_logprobs_says_null(oai, fake_openai):
    fake_openai.script(Text("hi there"))
    reply = oai.chat.completions.create(model="fake-model", messages=HELLO)
    assert reply.choices[0].logprobs is None and "logprobs" not in _sent(fake_openai)


@pytest.mark.parametrize("stream", [False, True])
def test_the_responses_door_relays_logprobs_when_include_asks(oai, fake_openai, stream):
    fake_openai.script(Text("The sky is blue today."))
    reply = oai.responses.create(model="fake-model", input="hello", store=False, stream=stream, top_logprobs=2,
                                 include=["message.output_text.logprobs"])
    if stream:
        events = list(reply)
        deltas = [entry for event in events if event.type == "response.output_text.delta"
                  for entry in event.logprobs]
        assert _tokens(deltas) == "The sky is blue today."
        done = next(event for event in events if event.type == "response.output_text.done")
        assert _tokens(done.logprobs) == "The sky is blue today."
        reply = events[-1].response
    part = reply.output[0].content[0]
    assert part.text == "The sky is blue today." and _tokens(part.logprobs) == part.text
    assert (_sent(fake_openai)["logprobs"], _sent(fake_openai)["top_logprobs"]) == (True, 2)


def test_the_responses_door_asks_no_logprobs_without_include(oai, fake_openai):
    fake_openai.script(Text("hi there"))
    reply = oai.responses.create(model="fake-model", input="hello", store=False, include=[])
    assert reply.output[0].content[0].logprobs == [] and "logprobs" not in _sent(fake_openai)


# --- /v1/messages: service_tier, cache_control, citations ----------------------------------------------------

def _message(claude, model: str, stream: bool, **fields) -> None:
    if stream:
        with claude.messages.stream(model=model, max_tokens=20, **{"messages": HELLO, **fields}) as events:
            list(events)
    else:
        claude.messages.create(model=model, max_tokens=20, **{"messages": HELLO, **fields})


@pytest.mark.parametrize("stream", [False, True])
def test_service_tier_and_cache_control_reach_an_anthropic_upstream_as_sent(claude, fake_anthropic, stream):
    fake_anthropic.script(Text("hi"))
    _message(claude, CLAUDE, stream, service_tier="standard_only",
             extra_body={"cache_control": {"type": "ephemeral", "ttl": "5m"}})
    sent = _sent(fake_anthropic)
    assert (sent["service_tier"], sent["cache_control"]) == ("standard_only", {"type": "ephemeral", "ttl": "5m"})


def test_block_cache_breakpoints_become_the_top_level_cache_control_for_an_anthropic_upstream(claude,
                                                                                            fake_anthropic):
    fake_anthropic.script(Text("hi"))
    system = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    messages = [{"role": "user", "content": [{"type": "text", "text": "hello",
                                              "cache_control": {"type": "ephemeral"}}]}]
    claude.messages.create(model=CLAUDE, max_tokens=20, system=system, messages=messages)
    assert _sent(fake_anthropic)["cache_control"] == {"type": "ephemeral", "ttl": "1h"}


@pytest.mark.parametrize("stream", [False, True])
def test_an_openai_upstream_gets_service_tier_in_its_terms_and_no_cache_control(claude, fake_openai, stream):
    fake_openai.script(Text("hi"))
    messages = [{"role": "user", "content": [{"type": "text", "text": "hello",
                                              "cache_control": {"type": "ephemeral"}}]}]
    _message(claude, "fake-model", stream, service_tier="standard_only", messages=messages,
             extra_body={"cache_control": {"type": "ephemeral"}})
    sent = _sent(fake_openai)
    assert sent["service_tier"] == "default" and "cache_control" not in sent
    assert sent["messages"] == HELLO


def test_the_agent_refuses_service_tier_and_takes_cache_control(claude, fake_openai):
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(model="agent", max_tokens=20, messages=HELLO, service_tier="auto")
    assert caught.value.body["error"]["message"].startswith("service_tier:")
    assert fake_openai.bodies() == []
    fake_openai.script(Text("hi"))
    reply = claude.messages.create(model="agent", max_tokens=20, messages=HELLO,
                                   extra_body={"cache_control": {"type": "ephemeral"}})
    assert reply.content[0].text == "hi"


def test_citations_are_refused_naming_them_and_an_empty_list_is_taken(claude, fake_anthropic):
    cited = {"type": "char_location", "cited_text": "x", "document_index": 0, "start_char_index": 0,
             "end_char_index": 1}
    conversation = [{"role": "user", "content": "hello"},
                    {"role": "assistant", "content": [{"type": "text", "text": "x", "citations": [cited]}]},
                    {"role": "user", "content": "more"}]
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(model=CLAUDE, max_tokens=20, messages=conversation)
    assert caught.value.body["error"]["message"].startswith("messages.1.content.0.citations:")
    assert fake_anthropic.bodies() == []
    fake_anthropic.script(Text("hi"))
    conversation[1]["content"][0]["citations"] = []
    assert claude.messages.create(model=CLAUDE, max_tokens=20, messages=conversation).content[0].text == "hi"


# --- unknown fields and passthrough connections ---------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
def test_a_passthrough_connection_gets_the_responses_doors_unknown_fields(oai, fake_openai, stream):
    fake_openai.script(Text("hi"))
    _respond(oai, stream, model="open/fake-model", extra_body=UNKNOWN)
    assert {name: _sent(fake_openai).get(name) for name in UNKNOWN} == UNKNOWN


@pytest.mark.parametrize(("model", "fake"), [("open/fake-model", "fake_openai"),
                                             ("claudepass/claude-fake", "fake_anthropic")])
@pytest.mark.parametrize("stream", [False, True])
def test_a_passthrough_connection_gets_the_messages_doors_unknown_fields(claude, request, model, fake, stream):
    upstream = request.getfixturevalue(fake)
    upstream.script(Text("hi"))
    _message(claude, model, stream, extra_body=UNKNOWN)
    assert {name: _sent(upstream).get(name) for name in UNKNOWN} == UNKNOWN


@pytest.mark.parametrize("model", ["fake-model", CLAUDE, "agent"])
def test_without_passthrough_the_two_doors_refuse_an_unknown_field_naming_it(oai, claude, fake_openai,
                                                                             fake_anthropic, model):
    with pytest.raises(openai.BadRequestError) as caught:
        oai.responses.create(model=model, input="hello", store=False, extra_body={"min_p": 0.05})
    assert (caught.value.code, caught.value.param) == ("unknown_field", "min_p")
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(model=model, max_tokens=20, messages=HELLO, extra_body={"min_p": 0.05})
    assert refused.value.body["error"]["message"].startswith("min_p:")
    assert fake_openai.bodies() == [] and fake_anthropic.bodies() == []


def test_truncation_disabled_is_taken_and_auto_is_refused_naming_it(oai, fake_openai):
    fake_openai.script(Text("hi"))
    assert _respond(oai, False, model="fake-model", truncation="disabled").output_text == "hi"
    assert "truncation" not in _sent(fake_openai)
    with pytest.raises(openai.BadRequestError) as caught:
        oai.responses.create(model="fake-model", input="hello", store=False, truncation="auto")
    assert (caught.value.code, caught.value.param) == ("unsupported_parameter", "truncation")
    assert len(fake_openai.bodies()) == 1

"""Every request field reaches the upstream or is refused naming it, never dropped: a real daphne server in front
of an OpenAI-format and an Anthropic-format fake upstream (connections of the catalogue), driven by the official
SDKs, and the fakes' request logs as the witness of what went upstream."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest
import requests

from tests.e2e import server_with_fake_upstream
from tests.fakes.llm import Call, Text, ToolCalls

pytestmark = pytest.mark.e2e

CLAUDE = "claude/claude-fake"
HELLO = [{"role": "user", "content": "hello"}]
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}
SCHEMA = {"name": "city", "schema": {"type": "object", "properties": {"name": {"type": "string"}}}, "strict": True}

# Each listed chat field, as a client sends it.
CHAT_FIELDS = {
    "response_format": {"type": "json_schema", "json_schema": SCHEMA},
    "top_p": 0.5, "seed": 7, "frequency_penalty": 0.25, "presence_penalty": -0.5, "logprobs": True,
    "top_logprobs": 3, "logit_bias": {"50256": -100}, "parallel_tool_calls": False, "user": "u-42", "n": 1,
    "service_tier": "default", "metadata": {"team": "blue"},
}


@pytest.fixture(scope="module")
def live(fake_openai_server, fake_anthropic_server):
    server, headers = server_with_fake_upstream(fake_openai_server)
    try:
        made = requests.post(f"{server.base_url}/api/connections", headers=headers, timeout=10, json={
            "name": "claude", "provider": "anthropic", "base_url": fake_anthropic_server.base_url,
            "api_key": "sk-ant-fake", "models": ["claude-fake"]})
        assert made.status_code == 201, made.text
        made = requests.post(f"{server.base_url}/api/connections", headers=headers, timeout=10, json={
            "name": "open", "provider": "openai", "base_url": fake_openai_server.base_url, "models": ["fake-model"],
            "passthrough": True})
        assert made.status_code == 201, made.text
        assert made.json()["passthrough"] is True
        yield server, headers
    finally:
        server.stop()


@pytest.fixture
def oai(live, fake_openai, fake_anthropic):
    server, _ = live
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="placeholder", max_retries=0)


@pytest.fixture
def claude(live, fake_openai, fake_anthropic):
    server, _ = live
    return anthropic.Anthropic(base_url=server.base_url, api_key="placeholder", max_retries=0)


def _sent(fake) -> dict:
    return fake.bodies()[-1]


# --- /v1/chat/completions -----------------------------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
def test_every_listed_chat_field_reaches_an_openai_upstream_as_sent(oai, fake_openai, stream):
    fake_openai.script(Text('{"name": "Oslo"}'))
    reply = oai.chat.completions.create(model="fake-model", messages=HELLO, stream=stream, tools=[WEATHER],
                                        **CHAT_FIELDS)
    if stream:
        list(reply)
    sent = _sent(fake_openai)
    assert {name: sent.get(name) for name in CHAT_FIELDS} == CHAT_FIELDS
    assert type(sent["logit_bias"]["50256"]) is int and type(sent["seed"]) is int  # as sent, not made floats


def test_a_json_object_format_reaches_an_openai_upstream_and_text_is_the_default(oai, fake_openai):
    fake_openai.script(Text("{}"), Text("plain"))
    oai.chat.completions.create(model="fake-model", messages=HELLO, response_format={"type": "json_object"})
    assert _sent(fake_openai)["response_format"] == {"type": "json_object"}
    oai.chat.completions.create(model="fake-model", messages=HELLO, response_format={"type": "text"})
    assert "response_format" not in _sent(fake_openai)


def test_fields_the_client_did_not_set_are_not_sent(oai, fake_openai):
    fake_openai.script(Text("hi"))
    oai.chat.completions.create(model="fake-model", messages=HELLO)
    assert set(_sent(fake_openai)) == {"model", "messages", "stream"}


@pytest.mark.parametrize("stream", [False, True])
def test_an_anthropic_upstream_gets_top_p_stop_tool_choice_and_user_in_its_own_terms(oai, fake_anthropic, stream):
    fake_anthropic.script(Text("hi"))
    reply = oai.chat.completions.create(model=CLAUDE, messages=HELLO, stream=stream, tools=[WEATHER], top_p=0.5,
                                        stop=["END"], tool_choice="required", user="u-42",
                                        parallel_tool_calls=False, n=1)
    if stream:
        list(reply)
    sent = _sent(fake_anthropic)
    assert (sent["top_p"], sent["stop_sequences"], sent["metadata"]) == (0.5, ["END"], {"user_id": "u-42"})
    assert sent["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert not {"user", "n", "parallel_tool_calls", "stop"} & set(sent)


@pytest.mark.parametrize("field", ["logit_bias", "seed", "frequency_penalty", "presence_penalty", "logprobs",
                                   "service_tier", "metadata"])
def test_a_field_an_anthropic_upstream_cannot_carry_is_a_400_naming_it(oai, fake_anthropic, field):
    value = {"top_logprobs": None}.get(field, CHAT_FIELDS[field])
    with pytest.raises(openai.BadRequestError) as caught:
        oai.chat.completions.create(model=CLAUDE, messages=HELLO, **{field: value})
    assert (caught.value.code, caught.value.param) == ("unsupported_parameter", field)
    assert fake_anthropic.bodies() == []


@pytest.mark.parametrize("stream", [False, True])
def test_json_mode_reaches_an_anthropic_upstream_as_a_forced_tool_whose_input_is_the_reply(oai, fake_anthropic,
                                                                                           stream):
    fake_anthropic.script(ToolCalls([Call("json_reply", '{"name": "Oslo"}', id="toolu_1")]))
    reply = oai.chat.completions.create(model=CLAUDE, messages=HELLO, stream=stream,
                                        response_format=CHAT_FIELDS["response_format"])
    if stream:
        chunks = list(reply)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
        finish = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices][-1]
        assert not any(chunk.choices[0].delta.tool_calls for chunk in chunks if chunk.choices)
    else:
        text, finish = reply.choices[0].message.content, reply.choices[0].finish_reason
        assert reply.choices[0].message.tool_calls is None
    assert (json.loads(text), finish) == ({"name": "Oslo"}, "stop")
    sent = _sent(fake_anthropic)
    assert [tool["name"] for tool in sent["tools"]] == ["json_reply"]
    assert sent["tools"][0]["input_schema"] == SCHEMA["schema"]
    assert sent["tool_choice"] == {"type": "tool", "name": "json_reply"}


def test_json_mode_with_tools_of_its_own_is_a_400_naming_response_format_for_an_anthropic_upstream(
        oai, fake_anthropic):
    with pytest.raises(openai.BadRequestError) as caught:
        oai.chat.completions.create(model=CLAUDE, messages=HELLO, tools=[WEATHER],
                                    response_format={"type": "json_object"})
    assert (caught.value.code, caught.value.param) == ("unsupported_parameter", "response_format")
    assert fake_anthropic.bodies() == []


def test_the_agent_refuses_a_field_its_loop_cannot_honour_naming_it(oai, fake_openai):
    for field in ("seed", "response_format", "logit_bias"):
        with pytest.raises(openai.BadRequestError) as caught:
            oai.chat.completions.create(model="agent", messages=HELLO, **{field: CHAT_FIELDS[field]})
        assert (caught.value.code, caught.value.param) == ("unsupported_parameter", field)
    assert fake_openai.bodies() == []
    fake_openai.script(Text("hi"))
    assert oai.chat.completions.create(model="agent", messages=HELLO, n=1).choices[0].message.content == "hi"


@pytest.mark.parametrize("n", [0, 2])
def test_n_other_than_one_is_a_400_naming_it(oai, fake_openai, n):
    with pytest.raises(openai.BadRequestError) as caught:
        oai.chat.completions.create(model="fake-model", messages=HELLO, n=n)
    assert caught.value.param == "n"
    assert fake_openai.bodies() == []


# --- /v1/responses ------------------------------------------------------------------------------------------

RESPONSES_FIELDS = {"top_p": 0.5, "parallel_tool_calls": False, "metadata": {"team": "blue"}, "user": "u-42",
                    "service_tier": "default"}


@pytest.mark.parametrize("stream", [False, True])
def test_the_responses_fields_reach_an_openai_upstream_as_its_chat_fields(oai, fake_openai, stream):
    fake_openai.script(Text('{"name": "Oslo"}'))
    text = {"format": {"type": "json_schema", **SCHEMA}}
    reply = oai.responses.create(model="fake-model", input="hello", stream=stream, store=False, text=text,
                                 max_output_tokens=30, tools=[{"type": "function", **WEATHER["function"]}],
                                 **RESPONSES_FIELDS)
    response = list(reply)[-1].response if stream else reply
    sent = _sent(fake_openai)
    assert {name: sent.get(name) for name in RESPONSES_FIELDS} == RESPONSES_FIELDS
    echoed = (response.top_p, response.parallel_tool_calls, response.metadata, response.user)
    assert echoed == (0.5, False, {"team": "blue"}, "u-42")  # the response object says what was asked
    assert sent["max_tokens"] == 30 and sent["response_format"] == {"type": "json_schema", "json_schema": SCHEMA}


def test_the_responses_door_translates_for_an_anthropic_upstream_and_refuses_what_it_cannot_carry(
        oai, fake_anthropic):
    fake_anthropic.script(Text("hi"))
    oai.responses.create(model=CLAUDE, input="hello", store=False, top_p=0.5, user="u-42")
    sent = _sent(fake_anthropic)
    assert (sent["top_p"], sent["metadata"]) == (0.5, {"user_id": "u-42"})
    for field, value in (("metadata", {"team": "blue"}), ("service_tier", "default")):
        with pytest.raises(openai.BadRequestError) as caught:
            oai.responses.create(model=CLAUDE, input="hello", store=False, **{field: value})
        assert (caught.value.code, caught.value.param) == ("unsupported_parameter", field)
    assert len(fake_anthropic.bodies()) == 1


# --- /v1/messages -------------------------------------------------------------------------------------------

MESSAGES_TOOL = {"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}


def _messages_call(claude, model: str, stream: bool, **fields) -> None:
    if stream:
        with claude.messages.stream(model=model, max_tokens=20, messages=HELLO, **fields) as events:
            list(events)
    else:
        claude.messages.create(model=model, max_tokens=20, messages=HELLO, **fields)


@pytest.mark.parametrize("stream", [False, True])
def test_the_messages_fields_reach_an_openai_upstream_as_its_chat_fields(claude, fake_openai, stream):
    fake_openai.script(Text("hi"))
    _messages_call(claude, "fake-model", stream, extra_body={"top_p": 0.5, "top_k": 40}, stop_sequences=["END"],
                   metadata={"user_id": "u-42"}, tools=[MESSAGES_TOOL],
                   tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True})
    sent = _sent(fake_openai)
    assert (sent["top_p"], sent["top_k"], sent["stop"], sent["user"]) == (0.5, 40, ["END"], "u-42")
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert sent["parallel_tool_calls"] is False


@pytest.mark.parametrize("stream", [False, True])
def test_the_messages_fields_reach_an_anthropic_upstream_as_they_were_sent(claude, fake_anthropic, stream):
    fake_anthropic.script(Text("hi"))
    choice = {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}
    _messages_call(claude, CLAUDE, stream, extra_body={"top_p": 0.5, "top_k": 40}, stop_sequences=["END"],
                   metadata={"user_id": "u-42"}, tools=[MESSAGES_TOOL], tool_choice=choice)
    sent = _sent(fake_anthropic)
    assert (sent["top_p"], sent["top_k"], sent["stop_sequences"]) == (0.5, 40, ["END"])
    assert (sent["metadata"], sent["tool_choice"]) == ({"user_id": "u-42"}, choice)


def test_the_messages_door_refuses_what_the_agent_cannot_honour_under_its_own_names(claude, fake_openai):
    for fields, param in (({"extra_body": {"top_k": 40}}, "top_k"),
                          ({"metadata": {"user_id": "u-42"}}, "metadata.user_id")):
        with pytest.raises(anthropic.BadRequestError) as caught:
            claude.messages.create(model="agent", max_tokens=20, messages=HELLO, **fields)
        assert caught.value.body["error"]["message"].startswith(f"{param}:")
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(model="fake-model", max_tokens=20, messages=HELLO, metadata={"team": "blue"})
    assert caught.value.body["error"]["message"].startswith("metadata.team:")
    assert fake_openai.bodies() == []


# --- fields this server does not know -----------------------------------------------------------------------

UNKNOWN = {"chat_template_kwargs": {"enable_thinking": False}, "min_p": 0.05}


@pytest.mark.parametrize("stream", [False, True])
def test_a_passthrough_connection_gets_unknown_fields_as_sent(oai, fake_openai, stream):
    fake_openai.script(Text("hi"))
    reply = oai.chat.completions.create(model="open/fake-model", messages=HELLO, stream=stream, top_p=0.5,
                                        extra_body=UNKNOWN)
    if stream:
        list(reply)
    sent = _sent(fake_openai)
    assert {name: sent.get(name) for name in UNKNOWN} == UNKNOWN and sent["top_p"] == 0.5
    assert sent["model"] == "fake-model" and sent["messages"] == HELLO


@pytest.mark.parametrize("model", ["fake-model", CLAUDE, "agent"])
def test_an_unknown_field_is_a_400_naming_it_without_a_passthrough_connection(oai, fake_openai, fake_anthropic,
                                                                               model):
    with pytest.raises(openai.BadRequestError) as caught:
        oai.chat.completions.create(model=model, messages=HELLO, extra_body={"min_p": 0.05})
    assert (caught.value.code, caught.value.param) == ("unknown_field", "min_p")
    assert fake_openai.bodies() == [] and fake_anthropic.bodies() == []


def test_the_connections_api_says_passthrough_and_it_is_off_by_default(live):
    server, headers = live
    listed = requests.get(f"{server.base_url}/api/connections", headers=headers, timeout=10).json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert {row["name"]: row["passthrough"] for row in rows} == {"default": False, "claude": False, "open": True}

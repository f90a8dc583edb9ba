"""What a client sends reaches the upstream, and what the upstream answers reaches the client: a real daphne
server in front of a llama.cpp-like fake upstream (no usage in streams, 400 `context_length_exceeded` for a
long prompt, `content: null` refused), driven by the official openai and anthropic SDKs with their default
retries, and the fake's request log as the witness of what went upstream."""

from __future__ import annotations

import anthropic
import openai
import pytest
import requests

from tests.e2e import poll, server_with_fake_upstream, sse_events
from tests.fakes.llm import Call, Error, FakeLlamaCpp, Text, ToolCalls

pytestmark = pytest.mark.e2e

LONG = "word " * 1000  # over the fake's context (2000 characters)


@pytest.fixture(scope="module")
def llama_server():
    with FakeLlamaCpp() as fake:
        yield fake


@pytest.fixture(scope="module")
def live(llama_server):
    server, headers = server_with_fake_upstream(llama_server, AGENTSITE_USAGE_FLUSH_S="0.2")
    yield server, headers
    server.stop()


@pytest.fixture
def llama(llama_server):
    llama_server.reset()
    return llama_server


@pytest.fixture
def oai(live, llama):
    server, _ = live
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="placeholder")  # the SDK's own retries: 2


@pytest.fixture
def claude(live, llama):
    server, _ = live
    return anthropic.Anthropic(base_url=server.base_url, api_key="placeholder")


def _posts(fake) -> int:
    return len(fake.bodies())


# --- 1. an upstream's 4xx stays the caller's 4xx ----------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_over_the_context_is_a_400_with_the_upstreams_code_sent_upstream_once(oai, llama, stream):
    with pytest.raises(openai.BadRequestError) as caught:
        reply = oai.chat.completions.create(model="fake-model", stream=stream,
                                            messages=[{"role": "user", "content": LONG}])
        if stream:
            list(reply)
    error = caught.value
    assert error.status_code == 400
    assert (error.code, error.param, error.type) == ("context_length_exceeded", "messages", "invalid_request_error")
    assert "maximum context length" in error.message
    assert _posts(llama) == 1


def test_the_responses_door_gives_the_upstreams_400(oai, llama):
    with pytest.raises(openai.BadRequestError) as caught:
        oai.responses.create(model="fake-model", input=LONG)
    assert (caught.value.status_code, caught.value.code) == (400, "context_length_exceeded")
    assert caught.value.param == "messages"
    assert _posts(llama) == 1


@pytest.mark.parametrize("stream", [False, True])
def test_the_messages_door_gives_the_upstreams_400_as_an_invalid_request(claude, llama, stream):
    with pytest.raises(anthropic.BadRequestError) as caught:
        if stream:
            with claude.messages.stream(model="fake-model", max_tokens=20,
                                        messages=[{"role": "user", "content": LONG}]) as events:
                list(events)
        else:
            claude.messages.create(model="fake-model", max_tokens=20, messages=[{"role": "user", "content": LONG}])
    assert caught.value.status_code == 400
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert "maximum context length" in caught.value.body["error"]["message"]
    assert _posts(llama) == 1


def test_the_agent_model_gives_the_upstreams_400(oai, llama):
    with pytest.raises(openai.BadRequestError) as caught:
        oai.chat.completions.create(model="agent", messages=[{"role": "user", "content": LONG}])
    assert (caught.value.code, caught.value.param) == ("context_length_exceeded", "messages")
    assert _posts(llama) == 1


def test_the_api_chat_stream_error_event_carries_the_upstreams_status_and_code(live, llama):
    server, headers = live
    session = requests.post(f"{server.base_url}/api/sessions", json={"name": "long"}, headers=headers,
                            timeout=10).json()
    with requests.post(f"{server.base_url}/api/sessions/{session['id']}/chat", json={"message": LONG},
                       headers=headers, stream=True, timeout=30) as response:
        events = [(name, data) for name, data in sse_events(response) if name != "comment"]
    name, data = events[-1]
    assert name == "error" and data["code"] == "upstream_error" and data["status"] == 400
    assert (data["details"]["code"], data["details"]["param"]) == ("context_length_exceeded", "messages")
    assert _posts(llama) == 1


def test_an_upstream_5xx_is_still_a_502(oai, llama):
    llama.script(Error(503, "loading model"))
    client = oai.with_options(max_retries=0)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "hi"}])
    assert (caught.value.status_code, caught.value.code) == (502, "upstream_error")


# --- 2. usage is never a fake zero ------------------------------------------------------------------------------

PROMPT = "Say something about the sea, please."  # 36 characters: 9 tokens by the estimate (4 characters a token)
REPLY = "The sea is wide and deep."  # 25 characters: 7 tokens


def _key(live, name: str) -> tuple[str, str]:
    server, headers = live
    made = requests.post(f"{server.base_url}/api/keys", json={"name": name, "scopes": ["v1"]}, headers=headers,
                         timeout=10)
    assert made.status_code == 201, made.text
    return str(made.json()["id"]), made.json()["key"]


def _metered(live, key_id: str, requests_expected: int) -> dict:
    server, headers = live

    def mine() -> dict | None:
        response = requests.get(f"{server.base_url}/api/usage?group_by=key", headers=headers, timeout=10)
        rows = [row for row in response.json()["results"] if row["key"] == key_id]
        return rows[0] if rows and rows[0]["requests"] == requests_expected else None

    return poll(mine, f"{requests_expected} calls of the key metered")


def test_a_stream_without_upstream_usage_reports_the_estimate_the_meter_records(live, llama):
    server, _ = live
    key_id, key = _key(live, "usage-stream")
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=key, max_retries=0)
    llama.script(Text(REPLY))
    chunks = list(client.chat.completions.create(model="fake-model", stream=True,
                                                 stream_options={"include_usage": True},
                                                 messages=[{"role": "user", "content": PROMPT}]))
    assert llama.bodies()[-1]["stream_options"] == {"include_usage": True}  # asked for, and not sent
    usage = chunks[-1].usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (9, 7, 16)
    assert usage.model_extra == {"estimated": True}
    metered = _metered(live, key_id, 1)
    assert (metered["prompt_tokens"], metered["completion_tokens"]) == (9, 7)


def test_the_responses_stream_and_the_messages_stream_report_the_estimate(oai, claude, llama):
    llama.script(Text(REPLY), Text(REPLY))
    events = list(oai.responses.create(model="fake-model", input=PROMPT, stream=True, store=False))
    assert events[-1].type == "response.completed"
    usage = events[-1].response.usage
    assert (usage.input_tokens, usage.output_tokens) == (9, 7) and usage.model_extra == {"estimated": True}
    with claude.messages.stream(model="fake-model", max_tokens=50,
                                messages=[{"role": "user", "content": PROMPT}]) as stream:
        message = stream.get_final_message()
    assert (message.usage.input_tokens, message.usage.output_tokens) == (9, 7)


def test_a_whole_agent_reply_reports_estimated_usage_and_says_so_in_a_header(live, llama):
    server, _ = live
    llama.script(Text(REPLY))
    response = requests.post(f"{server.base_url}/v1/chat/completions", timeout=30, json={
        "model": "agent", "messages": [{"role": "user", "content": PROMPT}]})
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    assert usage["prompt_tokens"] > 9 and usage["completion_tokens"] == 7 and usage["estimated"] is True
    assert response.headers["X-Agentsite-Usage"] == "estimated"
    assert response.headers["X-Agentsite-Upstream"] == "default/fake-model"  # who answered the agent's model


def test_upstream_usage_is_passed_on_unmarked(live, llama):
    server, _ = live
    llama.script(Text(REPLY, usage=(30, 8)))  # a whole reply: llama.cpp reports its usage there
    response = requests.post(f"{server.base_url}/v1/chat/completions", timeout=30, json={
        "model": "fake-model", "messages": [{"role": "user", "content": PROMPT}]})
    assert response.json()["usage"] == {"prompt_tokens": 30, "completion_tokens": 8, "total_tokens": 38}
    assert "X-Agentsite-Usage" not in response.headers


def test_a_refused_request_is_metered_without_tokens(live, llama):
    server, _ = live
    key_id, key = _key(live, "usage-refused")
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=key, max_retries=0)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": LONG}])
    metered = _metered(live, key_id, 1)
    assert (metered["prompt_tokens"], metered["completion_tokens"]) == (0, 0)


# --- 4. tool calls as sent --------------------------------------------------------------------------------------

BROKEN = '{ "city":'  # a model cut off mid-arguments
WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}


@pytest.mark.parametrize("stream", [False, True])
def test_arguments_that_are_not_json_reach_a_chat_completions_client_as_sent(oai, llama, stream):
    llama.script(ToolCalls([Call("get_weather", BROKEN, id="call_1")]))
    reply = oai.chat.completions.create(model="fake-model", stream=stream, tools=[WEATHER_TOOL],
                                        messages=[{"role": "user", "content": "weather?"}])
    if stream:
        calls = [call for chunk in reply if chunk.choices for call in chunk.choices[0].delta.tool_calls or []]
        arguments = "".join(call.function.arguments or "" for call in calls)
    else:
        arguments = reply.choices[0].message.tool_calls[0].function.arguments
    assert arguments == BROKEN


@pytest.mark.parametrize("stream", [False, True])
def test_arguments_that_are_not_json_reach_a_responses_client_as_sent(oai, llama, stream):
    llama.script(ToolCalls([Call("get_weather", BROKEN, id="call_1")]))
    tool = {"type": "function", "name": "get_weather", "parameters": WEATHER_TOOL["function"]["parameters"]}
    if stream:
        events = list(oai.responses.create(model="fake-model", input="weather?", tools=[tool], stream=True))
        assert [event.arguments for event in events if event.type == "response.function_call_arguments.done"] == [
            BROKEN]
        response = events[-1].response
    else:
        response = oai.responses.create(model="fake-model", input="weather?", tools=[tool])
    assert [item.arguments for item in response.output if item.type == "function_call"] == [BROKEN]


@pytest.mark.parametrize("stream", [False, True])
def test_the_messages_door_reports_arguments_that_are_not_json_as_the_upstreams_error(claude, llama, stream):
    llama.script(ToolCalls([Call("get_weather", BROKEN, id="call_1")]))
    tool = {"name": "get_weather", "input_schema": WEATHER_TOOL["function"]["parameters"]}
    client = claude.with_options(max_retries=0)
    with pytest.raises(anthropic.APIError) as caught:
        if stream:
            with client.messages.stream(model="fake-model", max_tokens=50, tools=[tool],
                                        messages=[{"role": "user", "content": "weather?"}]) as events:
                list(events)
        else:
            client.messages.create(model="fake-model", max_tokens=50, tools=[tool],
                                   messages=[{"role": "user", "content": "weather?"}])
    assert "get_weather" in str(caught.value) and "not valid JSON" in str(caught.value)
    if not stream:
        assert caught.value.status_code == 502


def _assistant_sent(fake) -> dict:
    return next(message for message in fake.bodies()[-1]["messages"] if message["role"] == "assistant")


def test_an_assistant_turn_with_tool_calls_keeps_its_empty_content_on_chat_completions(oai, llama):
    history = [{"role": "user", "content": "weather?"},
               {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {
                   "name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    for stream in (False, True):
        llama.script(Text("Sunny."))
        reply = oai.chat.completions.create(model="fake-model", stream=stream, tools=[WEATHER_TOOL], messages=history)
        if stream:
            list(reply)
        assert _assistant_sent(llama)["content"] == ""
    null = [history[0], {**history[1], "content": None}, history[2]]
    with pytest.raises(openai.BadRequestError):  # null stays null, and this upstream refuses it: its 400
        oai.chat.completions.create(model="fake-model", tools=[WEATHER_TOOL], messages=null)
    assert _assistant_sent(llama)["content"] is None


def test_a_responses_tool_round_sends_the_upstream_a_string_content(oai, llama):
    llama.script(Text("Sunny."))
    tool = {"type": "function", "name": "get_weather", "parameters": WEATHER_TOOL["function"]["parameters"]}
    response = oai.responses.create(model="fake-model", tools=[tool], store=False, input=[
        {"role": "user", "content": "weather?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}])
    assert response.output_text == "Sunny."
    assert _assistant_sent(llama)["content"] == ""


def test_a_messages_tool_round_sends_the_upstream_a_string_content(claude, llama):
    llama.script(Text("Sunny."))
    tool = {"name": "get_weather", "input_schema": WEATHER_TOOL["function"]["parameters"]}
    message = claude.messages.create(model="fake-model", max_tokens=50, tools=[tool], messages=[
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "get_weather",
                                           "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"}]}])
    assert message.content[0].text == "Sunny."
    assert _assistant_sent(llama)["content"] == ""


# --- 6. the rest of the SDKs' calls -----------------------------------------------------------------------------

def test_models_retrieve_finds_an_id_with_a_slash_and_404s_an_unknown_one(oai):
    listed = [model.id for model in oai.models.list()]
    assert "default/fake-model" in listed
    for model_id in ("default/fake-model", "agent"):
        model = oai.models.retrieve(model_id)
        assert (model.id, model.object) == (model_id, "model")
    with pytest.raises(openai.NotFoundError) as caught:
        oai.models.retrieve("default/no-such-model")
    assert caught.value.code == "model_not_found"


def test_a_missing_previous_response_names_its_param(oai, llama):
    with pytest.raises(openai.NotFoundError) as caught:
        oai.responses.create(model="fake-model", input="more", previous_response_id="resp_" + "0" * 32)
    assert (caught.value.code, caught.value.param) == ("not_found", "previous_response_id")
    assert _posts(llama) == 0


def test_input_items_lists_what_a_stored_response_answered(oai, llama):
    llama.script(Text("First."), Text("Second."))
    first = oai.responses.create(model="fake-model", input="one")
    second = oai.responses.create(model="fake-model", input="two", previous_response_id=first.id)
    items = list(oai.responses.input_items.list(second.id, order="asc"))
    assert [item.type for item in items] == ["message", "message", "message"]
    assert [(item.role, item.content[0].text) for item in items] == [("user", "one"), ("assistant", "First."),
                                                                     ("user", "two")]
    newest = oai.responses.input_items.list(second.id, limit=1)
    assert [item.content[0].text for item in newest.data] == ["two"] and newest.has_more
    after = oai.responses.input_items.list(second.id, limit=5, after=newest.data[0].id)
    assert [item.content[0].text for item in after.data] == ["First.", "one"] and not after.has_more
    with pytest.raises(openai.NotFoundError):
        oai.responses.input_items.list("resp_" + "0" * 32)
    with pytest.raises(openai.BadRequestError) as caught:
        oai.responses.input_items.list(second.id, limit=101)
    assert caught.value.param == "limit"

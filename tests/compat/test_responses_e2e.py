"""POST /v1/responses (issue 29 item 1) on a real daphne server, driven by the official openai SDK's
`responses.create`, over an OpenAI-format upstream (the default connection) and an Anthropic-format one (the
connection `claude`), both loopback fakes."""

from __future__ import annotations

import json

import openai
import pytest
import requests

from tests.e2e import server_with_fake_upstream, sse_events
from tests.fakes.llm import Call, Hang, StreamError, Text, ToolCalls

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def responses_server(fake_openai_server, fake_anthropic_server):
    server, headers = server_with_fake_upstream(fake_openai_server)
    created = requests.post(f"{server.base_url}/api/connections", headers=headers, timeout=10, json={
        "name": "claude", "provider": "anthropic", "base_url": fake_anthropic_server.base_url, "api_key": "sk-ant",
        "models": ["claude-x"]})
    assert created.status_code == 201, created.text
    yield server, headers
    server.stop()


@pytest.fixture(params=["openai", "anthropic"])
def upstream(request, responses_server, fake_openai, fake_anthropic):
    """(client, model, fake) for each upstream wire format; the client is anonymous (loopback, compat_auth
    local)."""
    server, _ = responses_server
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="placeholder", max_retries=0)
    if request.param == "openai":
        return client, "fake-model", fake_openai
    return client, "claude/claude-x", fake_anthropic


def _user_texts(body) -> list[str]:
    texts = []
    for message in body["messages"]:
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [part.get("text", "") for part in content if part.get("type") == "text"]
    return texts


def test_a_plain_response_with_instructions_temperature_and_max_output_tokens(upstream):
    client, model, fake = upstream
    fake.script(Text("Hello there"))
    response = client.responses.create(model=model, input="hi", instructions="Be brief.", temperature=0.5,
                                       max_output_tokens=50)
    assert response.object == "response" and response.status == "completed" and response.id.startswith("resp_")
    assert response.output_text == "Hello there" and response.output[0].type == "message"
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
    sent = fake.bodies()[-1]
    assert sent["temperature"] == 0.5 and sent["max_tokens"] == 50
    system = sent.get("system") or sent["messages"][0]["content"]
    assert "Be brief." in json.dumps(system) and "hi" in _user_texts(sent)


def test_item_list_input_with_an_image(upstream):
    client, model, fake = upstream
    png = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
    fake.script(Text("a dot"))
    response = client.responses.create(model=model, input=[
        {"role": "user", "content": [{"type": "input_text", "text": "what is this?"},
                                     {"type": "input_image", "image_url": f"data:image/png;base64,{png}"}]}])
    assert response.output_text == "a dot"
    assert png in json.dumps(fake.bodies()[-1])


def test_a_function_tool_round_trip(upstream):
    client, model, fake = upstream
    tools = [{"type": "function", "name": "get_weather", "description": "Weather of a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
    fake.script(ToolCalls([Call("get_weather", {"city": "Oslo"}, id="call_1")]), Text("It is sunny in Oslo."))
    first = client.responses.create(model=model, input="weather in Oslo?", tools=tools, tool_choice="auto",
                                    store=False)
    call = next(item for item in first.output if item.type == "function_call")
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Oslo"}
    assert call.call_id == "call_1"
    second = client.responses.create(model=model, tools=tools, input=[
        {"role": "user", "content": "weather in Oslo?"},
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])
    assert second.output_text == "It is sunny in Oslo."
    assert "sunny" in json.dumps(fake.bodies()[-1])
    assert "get_weather" in json.dumps(fake.bodies()[0]["tools"])


def test_tool_choice_naming_a_function_reaches_the_upstream(upstream):
    client, model, fake = upstream
    fake.script(ToolCalls([Call("lookup", {}, id="call_2")]))
    client.responses.create(model=model, input="x", tools=[{"type": "function", "name": "lookup", "parameters": {
        "type": "object", "properties": {}}}], tool_choice={"type": "function", "name": "lookup"})
    assert "lookup" in json.dumps(fake.bodies()[-1]["tool_choice"])


def test_streaming_gives_the_typed_events_in_order(upstream):
    client, model, fake = upstream
    fake.script(Text("one two three"))
    events = list(client.responses.create(model=model, input="count", stream=True))
    kinds = [event.type for event in events]
    assert kinds[:5] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added", "response.output_text.delta"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert "".join(event.delta for event in events if event.type == "response.output_text.delta") == "one two three"
    done = events[-1].response
    assert done.output_text == "one two three" and done.usage.total_tokens > 0


def test_streaming_a_function_call(upstream):
    client, model, fake = upstream
    fake.script(ToolCalls([Call("get_weather", {"city": "Oslo"}, id="call_s")]))
    events = list(client.responses.create(model=model, input="weather?", stream=True, tools=[
        {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}]))
    kinds = [event.type for event in events]
    assert "response.function_call_arguments.delta" in kinds
    done = next(event for event in events if event.type == "response.function_call_arguments.done")
    assert json.loads(done.arguments) == {"city": "Oslo"}
    assert kinds.index("response.function_call_arguments.done") < kinds.index("response.completed")
    assert events[-1].response.output[-1].type == "function_call"


def test_previous_response_id_continues_a_stored_conversation(upstream):
    client, model, fake = upstream
    fake.script(Text("My name is Bot."), Text("You asked my name."))
    first = client.responses.create(model=model, input="What is your name?")
    second = client.responses.create(model=model, input="What did I ask?", previous_response_id=first.id)
    assert second.previous_response_id == first.id
    assert _user_texts(fake.bodies()[-1])[-3:] == ["What is your name?", "My name is Bot.", "What did I ask?"]
    assert client.responses.retrieve(second.id).output_text == "You asked my name."
    # What was sent (encoded from the run's parts) is what was stored (the object, encoded by the ORM).
    assert client.responses.retrieve(second.id).model_dump() == second.model_dump()
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=model, input="again", previous_response_id=first.id)


def test_store_false_keeps_nothing(upstream):
    client, model, fake = upstream
    fake.script(Text("not kept"))
    response = client.responses.create(model=model, input="x", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)


def test_another_users_response_is_not_found(responses_server, fake_openai):
    server, headers = responses_server
    mine = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=headers["Authorization"][7:], max_retries=0)
    anonymous = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="placeholder", max_retries=0)
    fake_openai.script(Text("private"), Text("anonymous"))
    private = mine.responses.create(model="fake-model", input="secret")
    assert mine.responses.retrieve(private.id).output_text == "private"
    for attempt in (lambda: anonymous.responses.retrieve(private.id),
                    lambda: anonymous.responses.delete(private.id),
                    lambda: anonymous.responses.create(model="fake-model", input="x", previous_response_id=private.id)):
        with pytest.raises(openai.NotFoundError):
            attempt()
    theirs = anonymous.responses.create(model="fake-model", input="y")
    with pytest.raises(openai.NotFoundError):
        mine.responses.retrieve(theirs.id)
    assert mine.responses.retrieve(private.id).id == private.id  # still there


def test_structured_output_goes_to_an_openai_upstream_and_to_anthropic_as_a_forced_tool(upstream):
    client, model, fake = upstream
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"],
              "additionalProperties": False}
    text = {"format": {"type": "json_schema", "name": "reply", "schema": schema, "strict": True}}
    if model == "fake-model":
        fake.script(Text('{"answer": "42"}'))
        response = client.responses.create(model=model, input="answer", text=text)
        assert json.loads(response.output_text) == {"answer": "42"}
        assert fake.bodies()[-1]["response_format"] == {"type": "json_schema", "json_schema": {
            "name": "reply", "schema": schema, "strict": True}}
    else:
        fake.script(ToolCalls([Call("json_reply", '{"answer": "42"}', id="toolu_1")]))
        response = client.responses.create(model=model, input="answer", text=text)
        assert json.loads(response.output_text) == {"answer": "42"}
        assert fake.bodies()[-1]["tool_choice"] == {"type": "tool", "name": "json_reply"}
        with pytest.raises(openai.BadRequestError) as caught:  # with tools of its own, it cannot be forced
            client.responses.create(model=model, input="answer", text=text, tools=[
                {"type": "function", "name": "f", "parameters": {"type": "object"}}])
        assert caught.value.body["param"] == "text.format" and len(fake.bodies()) == 1


def test_unsupported_fields_are_refused_by_name_and_documented_ones_ignored(upstream):
    client, model, fake = upstream
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=model, input="x", extra_body={"background": True})
    assert caught.value.body["param"] == "background"
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=model, input=[{"type": "item_reference", "id": "x"}])
    assert caught.value.body["param"] == "input[0].type"
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=model, input=[])
    assert caught.value.body["param"] == "input"
    fake.script(Text("fine"))
    assert client.responses.create(model=model, input="x", truncation="disabled").output_text == "fine"


def test_the_agent_model_answers(responses_server, fake_openai):
    server, _ = responses_server
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="placeholder", max_retries=0)
    fake_openai.script(Text("agent here"), Text("agent streams"))
    assert client.responses.create(model="agent", input="hello").output_text == "agent here"
    events = list(client.responses.create(model="agent", input="hello", stream=True))
    assert events[-1].type == "response.completed" and events[-1].response.output_text == "agent streams"
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="agent", input="x", tools=[{"type": "function", "name": "f",
                                                                  "parameters": {"type": "object"}}])
    assert caught.value.body["param"] == "tools"


def test_a_stream_hang_up_stops_the_upstream(responses_server, fake_openai):
    server, _ = responses_server
    fake_openai.script(Hang(text="thinking"))
    response = requests.post(f"{server.base_url}/v1/responses", stream=True, timeout=10, json={
        "model": "fake-model", "stream": True, "input": "x"})
    for event, data in sse_events(response):
        if event == "response.output_text.delta":
            assert data["delta"] == "thinking"
            break
    response.close()
    fake_openai.wait_for_hangups_sync(1, timeout=2.0)


def test_an_unknown_model_is_404_and_a_bad_field_400(upstream):
    client, model, _ = upstream
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-model", input="x")
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=model, input="x", temperature=5)
    assert caught.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=model, input="x" * 32_001)
    assert caught.value.body["code"] == "message_too_long"


def test_usage_is_metered_as_on_chat_completions(responses_server, fake_openai):
    from tests.e2e import poll

    server, headers = responses_server
    # A key of its own: the usage counted for it is this test's alone, whatever earlier tests' calls are still
    # waiting for their flush.
    made = requests.post(f"{server.base_url}/api/keys", json={"name": "responses-usage", "scopes": ["v1"]},
                         headers=headers, timeout=10)
    assert made.status_code == 201, made.text

    def mine() -> dict:
        response = requests.get(f"{server.base_url}/api/usage?group_by=key", headers=headers, timeout=10)
        assert response.status_code == 200, response.text
        rows = [row for row in response.json()["results"] if row["key"] == str(made.json()["id"])]
        return rows[0] if rows else {"requests": 0, "total_tokens": 0}

    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=made.json()["key"], max_retries=0)
    fake_openai.script(Text("fine", usage=(12, 7)), Text("fine", usage=(12, 7)))
    assert client.responses.create(model="fake-model", input="hi", store=False).usage.total_tokens == 19
    events = list(client.responses.create(model="fake-model", input="hi", stream=True, store=False))
    assert events[-1].response.usage.input_tokens == 12 and events[-1].response.usage.output_tokens == 7
    after = poll(lambda: (now := mine())["requests"] == 2 and now, "the two calls flushed")
    assert after["total_tokens"] == 38


def test_an_upstream_failing_mid_stream_ends_it_with_response_failed(upstream):
    client, model, fake = upstream
    fake.script(StreamError(text="partial ", message="Overloaded."))
    events = list(client.responses.create(model=model, input="x", stream=True))
    assert [event.type for event in events][:2] == ["response.created", "response.in_progress"]
    assert events[-1].type == "response.failed" and events[-1].response.status == "failed"
    assert "Overloaded" in events[-1].response.error.message
    assert [event.sequence_number for event in events] == list(range(len(events)))

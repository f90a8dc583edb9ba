"""POST /v1/messages on a real daphne server, driven by the official anthropic SDK (issue 29, items 2-4): text,
streams, a tool use round trip, an image, count_tokens and the errors the SDK raises as its own classes, each
against an OpenAI-format and an Anthropic-format fake upstream (connections of the catalogue)."""

from __future__ import annotations

import base64
import json

import anthropic
import pytest
import requests

from tests.e2e import minute_with_room, server_with_fake_upstream
from tests.fakes.llm import Call, Hang, Text, ToolCalls

pytestmark = pytest.mark.e2e

PNG_1PX = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c6360f8ffff3f0005fe02fe"
    "a7d6a4a30000000049454e44ae426082")).decode()
PASSWORD = "a-long-enough-password-1"
WEATHER = {"name": "get_weather", "description": "Weather for a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture(scope="module")
def live(fake_openai_server, fake_anthropic_server):
    server, headers = server_with_fake_upstream(fake_openai_server, AGENTSITE_USAGE_FLUSH_S="0.2")
    try:
        made = requests.post(f"{server.base_url}/api/connections", headers=headers, timeout=10, json={
            "name": "claude", "provider": "anthropic", "base_url": fake_anthropic_server.base_url,
            "api_key": "sk-ant-fake", "models": ["claude-fake"]})
        assert made.status_code == 201, made.text
        yield server, headers
    finally:
        server.stop()


@pytest.fixture(params=["openai", "anthropic"])
def upstream(request, fake_openai, fake_anthropic):
    """(model, fake): the default connection's OpenAI-format fake, or the `claude` connection's Anthropic one."""
    return ("fake-model", fake_openai) if request.param == "openai" else ("claude/claude-fake", fake_anthropic)


@pytest.fixture
def client(live):
    server, _ = live
    return anthropic.Anthropic(base_url=server.base_url, api_key="placeholder", max_retries=0)


def _sent(fake) -> dict:
    return fake.bodies()[-1]


def test_create_returns_a_message(client, upstream):
    model, fake = upstream
    fake.script(Text("Hi from upstream.", usage=(5, 4)))
    message = client.messages.create(model=model, max_tokens=50, system="Be brief.", stop_sequences=["END"],
                                     messages=[{"role": "user", "content": "hello"}],
                                     extra_body={"temperature": 0.3})  # this SDK version has no argument for it
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert message.model == model
    assert [(block.type, block.text) for block in message.content] == [("text", "Hi from upstream.")]
    assert (message.stop_reason, message.stop_sequence) == ("end_turn", None)
    assert (message.usage.input_tokens, message.usage.output_tokens) == (5, 4)
    sent = _sent(fake)
    assert sent["temperature"] == 0.3 and sent["max_tokens"] == 50
    if fake.path == "/v1/messages":
        assert sent["system"] == "Be brief." and sent["stop_sequences"] == ["END"]
        assert sent["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]
    else:
        assert sent["messages"][0] == {"role": "system", "content": "Be brief."} and sent["stop"] == ["END"]


def test_system_blocks_and_a_max_tokens_stop(client, upstream):
    model, fake = upstream
    fake.script(Text("cut sh", finish_reason="length"))
    message = client.messages.create(model=model, max_tokens=2, system=[{"type": "text", "text": "One."},
                                                                        {"type": "text", "text": "Two."}],
                                     messages=[{"role": "user", "content": [{"type": "text", "text": "go"}]}])
    assert message.stop_reason == "max_tokens"
    sent = _sent(fake)
    assert (sent["system"] if fake.path == "/v1/messages" else sent["messages"][0]["content"]) == "One.\n\nTwo."


@pytest.fixture(params=["anthropic", "openai", "openai+stop_reason"])
def stopping(request, fake_openai, fake_anthropic):
    """(model, fake, says): an upstream that cuts the reply at a stop sequence and says which (Anthropic), one
    that cuts it without saying (OpenAI), and one that says it as vLLM does (`stop_reason`)."""
    if request.param == "anthropic":
        return "claude/claude-fake", fake_anthropic, True
    fake_openai.reports_stop_reason = request.param == "openai+stop_reason"
    return "fake-model", fake_openai, fake_openai.reports_stop_reason


@pytest.mark.parametrize("streamed", [False, True], ids=["create", "stream"])
def test_the_stop_sequence_that_ended_the_reply_is_named_where_the_upstream_says_it(client, stopping, streamed):
    model, fake, says = stopping
    fake.script(Text("one two END three STOP four", pieces=["one ", "two E", "ND three", " STOP four"]),
                Text("no sequence here"))
    ask = {"model": model, "max_tokens": 50, "stop_sequences": ["STOP", "END"],
           "messages": [{"role": "user", "content": "count"}]}
    for expected_text, expected in (("one two ", ("stop_sequence", "END") if says else ("end_turn", None)),
                                    ("no sequence here", ("end_turn", None))):
        if streamed:
            with client.messages.stream(**ask) as stream:
                events = list(stream)
                message = stream.get_final_message()
            delta = next(event for event in events if event.type == "message_delta").delta
            assert (delta.stop_reason, delta.stop_sequence) == expected
        else:
            message = client.messages.create(**ask)
        assert "".join(block.text for block in message.content) == expected_text
        assert (message.stop_reason, message.stop_sequence) == expected
    sent = fake.bodies()[-1]
    assert (sent["stop_sequences"] if fake.path == "/v1/messages" else sent["stop"]) == ["STOP", "END"]


def test_stream_yields_the_typed_events_in_order(client, upstream):
    model, fake = upstream
    fake.script(Text("one two three", pieces=["one ", "two ", "three"], usage=(3, 3)))
    with client.messages.stream(model=model, max_tokens=50, messages=[{"role": "user", "content": "count"}]) as stream:
        events = list(stream)
        final = stream.get_final_message()
    types = [event.type for event in events]
    assert types[0] == "message_start" and types[-1] == "message_stop"
    raw = [t for t in types if t not in ("text",)]  # the SDK adds its own `text` events after each delta
    assert raw == ["message_start", "content_block_start", "content_block_delta", "content_block_delta",
                   "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    assert "".join(event.delta.text for event in events if event.type == "content_block_delta") == "one two three"
    assert final.content[0].text == "one two three" and final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (3, 3)


def test_the_stream_has_a_ping_and_named_events(live, upstream):
    server, _ = live
    model, fake = upstream
    fake.script(Text("ok"))
    response = requests.post(f"{server.base_url}/v1/messages", timeout=10, json={
        "model": model, "max_tokens": 10, "stream": True, "messages": [{"role": "user", "content": "x"}]})
    assert response.status_code == 200 and response.headers["Content-Type"].startswith("text/event-stream")
    names = [frame.split("\n", 1)[0] for frame in response.text.split("\n\n") if frame]
    assert names[:2] == ["event: message_start", "event: ping"] and names[-1] == "event: message_stop"


def test_a_tool_use_round_trip(client, upstream):
    model, fake = upstream
    fake.script(ToolCalls([Call("get_weather", {"city": "Oslo"}, id="toolu_w")], text="Let me look."),
                Text("It is sunny in Oslo."))
    first = client.messages.create(model=model, max_tokens=100, tools=[WEATHER], tool_choice={"type": "any"},
                                   messages=[{"role": "user", "content": "weather in Oslo?"}])
    assert first.stop_reason == "tool_use"
    assert [block.type for block in first.content] == ["text", "tool_use"]
    use = first.content[1]
    assert (use.id, use.name, use.input) == ("toolu_w", "get_weather", {"city": "Oslo"})
    sent = _sent(fake)
    if fake.path == "/v1/messages":
        assert sent["tool_choice"] == {"type": "any"} and sent["tools"][0]["input_schema"] == WEATHER["input_schema"]
    else:
        assert sent["tool_choice"] == "required" and sent["tools"][0]["function"]["name"] == "get_weather"
    second = client.messages.create(model=model, max_tokens=100, tools=[WEATHER], messages=[
        {"role": "user", "content": "weather in Oslo?"},
        {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_w", "content": "sunny, 21 C"}]}])
    assert second.content[0].text == "It is sunny in Oslo." and second.stop_reason == "end_turn"
    history = _sent(fake)["messages"]
    if fake.path == "/v1/messages":
        assert history[1]["content"][1] == {"type": "tool_use", "id": "toolu_w", "name": "get_weather",
                                            "input": {"city": "Oslo"}}
        assert history[2]["content"][0]["tool_use_id"] == "toolu_w"
    else:
        assert history[1]["tool_calls"][0]["id"] == "toolu_w"
        assert history[2] == {"role": "tool", "tool_call_id": "toolu_w", "content": "sunny, 21 C"}


def test_a_streamed_tool_use(client, upstream):
    model, fake = upstream
    fake.script(ToolCalls([Call("get_weather", {"city": "Bergen"}, id="toolu_s")]))
    with client.messages.stream(model=model, max_tokens=100, tools=[WEATHER],
                                tool_choice={"type": "tool", "name": "get_weather"},
                                messages=[{"role": "user", "content": "Bergen?"}]) as stream:
        events = list(stream)
        final = stream.get_final_message()
    assert any(event.type == "content_block_delta" and event.delta.type == "input_json_delta" for event in events)
    assert final.stop_reason == "tool_use"
    assert [(b.type, b.id, b.input) for b in final.content] == [("tool_use", "toolu_s", {"city": "Bergen"})]
    sent = _sent(fake)
    assert sent["tool_choice"] == ({"type": "tool", "name": "get_weather"} if fake.path == "/v1/messages" else
                                   {"type": "function", "function": {"name": "get_weather"}})


def test_an_image_reaches_the_upstream(client, upstream):
    model, fake = upstream
    fake.script(Text("A pixel."))
    message = client.messages.create(model=model, max_tokens=20, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_1PX}},
        {"type": "text", "text": "What is this?"}]}])
    assert message.content[0].text == "A pixel."
    content = _sent(fake)["messages"][-1]["content"]
    if fake.path == "/v1/messages":
        assert content[0] == {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                          "data": PNG_1PX}}
    else:
        assert content[0]["image_url"]["url"] == f"data:image/png;base64,{PNG_1PX}"


def test_the_agent_model_answers(client, fake_openai):
    fake_openai.script(Text("the agent speaks"))
    message = client.messages.create(model="agent", max_tokens=100, messages=[{"role": "user", "content": "hi"}])
    assert message.model == "agent" and message.content[0].text == "the agent speaks"


def test_count_tokens_estimates_and_grows_with_the_prompt(client, upstream):
    model, fake = upstream
    short = client.messages.count_tokens(model=model, messages=[{"role": "user", "content": "hi"}])
    long = client.messages.count_tokens(model=model, system="x" * 400, tools=[WEATHER],
                                        messages=[{"role": "user", "content": "hi " * 100}])
    assert 0 < short.input_tokens < long.input_tokens
    assert long.input_tokens >= (400 + 300) // 4
    assert fake.bodies() == []  # an estimate: the upstream is not asked


def test_bad_requests_are_bad_request_errors_naming_the_field(client, upstream):
    model, fake = upstream
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model=model, max_tokens=10, messages=[{"role": "user", "content": "x"}],
                               extra_body={"thinking": {"type": "enabled", "budget_tokens": 1024}})
    assert caught.value.body["error"]["type"] == "invalid_request_error" and "thinking" in caught.value.message
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model=model, max_tokens=10, messages=[{"role": "user", "content": "x"}],
                               extra_body={"temperature": 1.5})
    assert "temperature" in caught.value.message
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model=model, max_tokens=10, messages=[
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_nobody", "content": "x"}]}])
    assert "toolu_nobody" in caught.value.message
    with pytest.raises(anthropic.NotFoundError) as caught:
        client.messages.create(model="ghost/model", max_tokens=10, messages=[{"role": "user", "content": "x"}])
    assert caught.value.body["error"]["type"] == "not_found_error" and "ghost/model" in caught.value.message
    assert fake.bodies() == []


def test_max_tokens_is_required(live):
    server, _ = live
    response = requests.post(f"{server.base_url}/v1/messages", timeout=10, json={
        "model": "fake-model", "messages": [{"role": "user", "content": "x"}]})
    assert response.status_code == 400
    assert response.json()["type"] == "error" and response.json()["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in response.json()["error"]["message"]


def test_a_bad_key_is_an_authentication_error(client, live):
    server, _ = live
    bad = anthropic.Anthropic(base_url=server.base_url, api_key="ask-not-a-real-key", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as caught:
        bad.messages.create(model="fake-model", max_tokens=10, messages=[{"role": "user", "content": "x"}])
    assert caught.value.body["error"]["type"] == "authentication_error"


def _user_with_key(server, name: str, budget: dict) -> str:
    made = requests.post(f"{server.base_url}/api/auth/register", json={"username": name, "password": PASSWORD},
                         timeout=10)
    assert made.status_code == 201, made.text
    headers = {"Authorization": f"Bearer {made.json()['token']}"}
    key = requests.post(f"{server.base_url}/api/keys", json={"name": "sdk", "scopes": ["v1"], "budget": budget},
                        headers=headers, timeout=10)
    assert key.status_code == 201, key.text
    return key.json()["key"]


@pytest.mark.parametrize("header", ["x-api-key", "bearer"])
def test_a_spent_key_budget_is_a_rate_limit_error(live, upstream, header):
    server, _ = live
    model, fake = upstream
    key = _user_with_key(server, f"msgs-{header}-{model.replace('/', '-')}", {"requests_per_minute": 1})
    minute_with_room()  # both calls in one minute of the server's clock
    client = (anthropic.Anthropic(base_url=server.base_url, api_key=key, max_retries=0) if header == "x-api-key"
              else anthropic.Anthropic(base_url=server.base_url, auth_token=key, max_retries=0))
    fake.script(Text("first"))
    assert client.messages.create(model=model, max_tokens=10,
                                  messages=[{"role": "user", "content": "x"}]).content[0].text == "first"
    with pytest.raises(anthropic.RateLimitError) as caught:
        client.messages.create(model=model, max_tokens=10, messages=[{"role": "user", "content": "x"}])
    assert caught.value.body["error"]["type"] == "rate_limit_error"
    assert int(caught.value.response.headers["Retry-After"]) > 0
    assert len(fake.bodies()) == 1


def test_a_hang_up_stops_the_upstream(live, upstream):
    server, _ = live
    model, fake = upstream
    fake.script(Hang(text="thinking"))
    response = requests.post(f"{server.base_url}/v1/messages", stream=True, timeout=10, json={
        "model": model, "max_tokens": 10, "stream": True, "messages": [{"role": "user", "content": "x"}]})
    lines = response.iter_lines()
    assert b"thinking" in next(line for line in lines if b"text_delta" in line)
    response.close()
    fake.wait_for_hangups_sync(1, timeout=2.0)


def test_an_upstream_failure_mid_stream_is_an_error_event(client, upstream):
    from tests.fakes.llm import StreamError

    model, fake = upstream
    fake.script(StreamError(text="half ", message="Overloaded."))
    with pytest.raises(anthropic.APIStatusError) as caught:  # noqa: PT012 - the error comes while reading
        with client.messages.stream(model=model, max_tokens=10, messages=[{"role": "user", "content": "x"}]) as s:
            list(s)
    assert "Overloaded" in str(caught.value.message)


# --- pydantic-ai against /v1/chat/completions: an agent framework's tool calling over both upstream formats ---

def test_a_pydantic_ai_agent_calls_its_tool_through_chat_completions(live, upstream):
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    server, _ = live
    model_name, fake = upstream
    fake.script(ToolCalls([Call("get_weather", {"city": "Oslo"}, id="call_pa")]), Text("It is sunny in Oslo."))
    model = OpenAIChatModel(model_name, provider=OpenAIProvider(base_url=f"{server.base_url}/v1",
                                                                api_key="placeholder"))
    agent = Agent(model, instructions="Answer about the weather.")
    asked: list[str] = []

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The weather in a city."""
        asked.append(city)
        return f"sunny, 21 C in {city}"

    result = agent.run_sync("What is the weather in Oslo?")
    assert result.output == "It is sunny in Oslo." and asked == ["Oslo"]
    first, second = fake.bodies()[-2:]
    if fake.path == "/v1/messages":
        assert first["tools"][0]["name"] == "get_weather"
        assert second["messages"][-1]["content"][0]["tool_use_id"] == "call_pa"
        assert "sunny, 21 C in Oslo" in json.dumps(second["messages"][-1]["content"][0]["content"])
    else:
        assert first["tools"][0]["function"]["name"] == "get_weather"
        assert second["messages"][-1] == {"role": "tool", "tool_call_id": "call_pa",
                                          "content": "sunny, 21 C in Oslo"}

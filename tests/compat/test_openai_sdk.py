"""/v1 against a real daphne server, driven by the official openai SDK, with a fake upstream LLM."""

import base64
import json

import numpy as np
import openai
import pytest
import requests

from tests.e2e import server_with_fake_upstream
from tests.fakes.llm import Call, Hang, Text, ToolCalls

pytestmark = pytest.mark.e2e  # every test here uses a live server its module's fixture starts

PNG_1PX = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c6360f8ffff3f0005fe02fe"
    "a7d6a4a30000000049454e44ae426082")).decode()


@pytest.fixture(scope="module")
def compat_server(fake_openai_server):
    server, headers = server_with_fake_upstream(fake_openai_server)
    yield server, headers
    server.stop()


@pytest.fixture
def client(compat_server, fake_openai):
    server, _ = compat_server
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="placeholder", max_retries=0)


@pytest.fixture
def async_client(compat_server, fake_openai):
    server, _ = compat_server
    return openai.AsyncOpenAI(base_url=f"{server.base_url}/v1", api_key="placeholder", max_retries=0)


def test_models_lists_the_provider_model_agent_and_the_embedding_model(client):
    ids = [model.id for model in client.models.list()]
    assert ids == ["default/fake-model", "agent", "agent:default", "hash-256"]  # the connection's model by its entry
    assert all(model.object == "model" and model.owned_by for model in client.models.list())


def test_create_returns_a_chat_completion_object(client, fake_openai):
    fake_openai.script(Text("Hi from upstream.", usage=(5, 4)))
    completion = client.chat.completions.create(model="fake-model", temperature=0.2, max_tokens=50,
                                                messages=[{"role": "user", "content": "hello"}])
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-") and completion.created > 0 and completion.model == "fake-model"
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content == "Hi from upstream."
    assert completion.choices[0].finish_reason == "stop"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens, completion.usage.total_tokens) == (
        5, 4, 9)
    sent = fake_openai.requests[-1].json()
    assert sent["model"] == "fake-model" and sent["temperature"] == 0.2 and sent["max_tokens"] == 50


def test_create_stream_yields_chunks_with_role_first_finish_last_and_usage(client, fake_openai):
    fake_openai.script(Text("one two three", pieces=["one ", "two ", "three"], usage=(3, 3)))
    chunks = list(client.chat.completions.create(model="fake-model", stream=True,
                                                 stream_options={"include_usage": True},
                                                 messages=[{"role": "user", "content": "count"}]))
    assert all(chunk.object == "chat.completion.chunk" for chunk in chunks)
    assert len({chunk.id for chunk in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    content = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert content == "one two three"
    with_choices = [chunk for chunk in chunks if chunk.choices]
    assert with_choices[-1].choices[0].finish_reason == "stop"
    assert all(chunk.choices[0].finish_reason is None for chunk in with_choices[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == 6


def test_the_stream_ends_with_done(compat_server, fake_openai):
    server, _ = compat_server
    fake_openai.script(Text("ok"))
    response = requests.post(f"{server.base_url}/v1/chat/completions", timeout=10, json={
        "model": "fake-model", "stream": True, "messages": [{"role": "user", "content": "x"}]})
    frames = [frame for frame in response.text.split("\n\n") if frame]
    assert frames[-1] == "data: [DONE]"
    assert all(frame.startswith("data: ") for frame in frames)


async def test_the_async_client_creates_and_streams(async_client, fake_openai):
    fake_openai.script(Text("async reply"), Text("async stream", pieces=["async ", "stream"]))
    completion = await async_client.chat.completions.create(model="fake-model",
                                                            messages=[{"role": "user", "content": "a"}])
    assert completion.choices[0].message.content == "async reply"
    stream = await async_client.chat.completions.create(model="fake-model", stream=True,
                                                        messages=[{"role": "user", "content": "b"}])
    parts = [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
    assert "".join(parts) == "async stream"


def test_tools_and_tool_choice_pass_through_to_the_provider(client, fake_openai):
    fake_openai.script(ToolCalls([Call("get_weather", {"city": "Oslo"}, id="call_w")]),
                       ToolCalls([Call("get_weather", {"city": "Bergen"}, id="call_s")]))
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                               "parameters": {"type": "object",
                                                              "properties": {"city": {"type": "string"}}}}}]
    completion = client.chat.completions.create(model="fake-model", tools=tools, tool_choice="auto",
                                                messages=[{"role": "user", "content": "weather in Oslo?"}])
    call = completion.choices[0].message.tool_calls[0]
    assert completion.choices[0].finish_reason == "tool_calls"
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == ("call_w", "get_weather",
                                                                                  {"city": "Oslo"})
    sent = fake_openai.requests[-1].json()
    assert sent["tools"][0]["function"]["name"] == "get_weather" and sent["tool_choice"] == "auto"
    stream = client.chat.completions.create(model="fake-model", tools=tools, stream=True,
                                            messages=[{"role": "user", "content": "and Bergen?"}])
    deltas = [chunk.choices[0] for chunk in stream if chunk.choices]
    streamed_calls = [call for choice in deltas for call in (choice.delta.tool_calls or [])]
    assert streamed_calls[0].function.name == "get_weather"
    assert json.loads("".join(c.function.arguments or "" for c in streamed_calls)) == {"city": "Bergen"}
    assert deltas[-1].finish_reason == "tool_calls"


def test_a_tool_result_conversation_is_translated_for_the_upstream(client, fake_openai):
    fake_openai.script(Text("It is sunny in Oslo."))
    completion = client.chat.completions.create(model="fake-model", messages=[
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_w", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_w", "content": "sunny"}])
    assert completion.choices[0].message.content == "It is sunny in Oslo."
    sent = fake_openai.requests[-1].json()["messages"]
    assert sent[-1]["role"] == "tool" and sent[-1]["tool_call_id"] == "call_w" and sent[-1]["content"] == "sunny"


def test_content_part_arrays_with_images_reach_the_provider(client, fake_openai):
    fake_openai.script(Text("A tiny image."))
    client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_1PX}"}}]}])
    parts = fake_openai.requests[-1].json()["messages"][-1]["content"]
    assert {"type": "text", "text": "What is this?"} in parts
    image = next(part for part in parts if part["type"] == "image_url")
    assert image["image_url"]["url"] == f"data:image/png;base64,{PNG_1PX}"


@pytest.fixture
def member_client(compat_server, fake_openai):
    """A client whose API key is a dashboard token: the server knows who calls."""
    server, headers = compat_server
    token = headers["Authorization"].split(" ", 1)[1]
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=token, max_retries=0)


def test_model_agent_runs_the_agent_loop_with_its_tools(member_client, fake_openai, fake_web):
    fake_web.page("/doc", "<html><body><p>Agents fetch pages.</p></body></html>")
    fake_openai.script(ToolCalls([Call("web_fetch", {"url": fake_web.url("/doc")})]), Text("Fetched it."))
    completion = member_client.chat.completions.create(model="agent",
                                                       messages=[{"role": "user", "content": "fetch"}])
    assert completion.choices[0].message.content == "Fetched it."
    assert completion.choices[0].message.tool_calls is None
    first = fake_openai.requests[-2].json()
    assert any(tool["function"]["name"] == "web_fetch" for tool in first["tools"])
    assert any(m["role"] == "tool" and "Agents fetch pages" in m["content"]
               for m in fake_openai.requests[-1].json()["messages"])


def test_an_anonymous_agent_call_is_offered_no_tools(client, fake_openai):
    fake_openai.script(Text("No tools for strangers."))
    completion = client.chat.completions.create(model="agent", messages=[{"role": "user", "content": "hi"}])
    assert completion.choices[0].message.content == "No tools for strangers."
    assert not fake_openai.requests[-1].json().get("tools")


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded"])
def test_a_non_json_body_is_refused_so_web_pages_cannot_post_without_preflight(compat_server, content_type):
    server, _ = compat_server
    response = requests.post(f"{server.base_url}/v1/chat/completions", headers={"Content-Type": content_type},
                             data=json.dumps({"model": "agent", "messages": [{"role": "user", "content": "x"}]}),
                             timeout=10)
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"


def test_a_lone_surrogate_in_streamed_text_still_ends_the_stream(compat_server, fake_openai):
    server, _ = compat_server
    fake_openai.script(Text("bad \ud800 text", pieces=["bad ", "\ud800", " text"]))
    response = requests.post(f"{server.base_url}/v1/chat/completions", timeout=10, json={
        "model": "fake-model", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 200
    last = response.text.rstrip().rsplit("\n\n", 1)[-1]
    assert last == "data: [DONE]" or json.loads(last[len("data: "):])["error"]["code"], last


def test_a_lone_surrogate_in_the_request_is_a_400(compat_server):
    server, _ = compat_server
    response = requests.post(f"{server.base_url}/v1/chat/completions", timeout=10, json={
        "model": "fake-model", "messages": [{"role": "user", "content": "\ud800"}]})
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_embeddings_are_the_knowledge_bases_256_d_vectors(client):
    from knowledge.embedding import embed

    result = client.embeddings.create(model="hash-256", input=["the quick brown fox", "一只狐狸"])
    assert result.model == "hash-256" and len(result.data) == 2
    first = np.array(result.data[0].embedding, dtype=np.float32)
    assert first.shape == (256,)
    assert np.isclose(np.linalg.norm(first), 1.0, atol=1e-5)
    assert np.allclose(first, embed("the quick brown fox"), atol=1e-6)
    as_base64 = client.embeddings.create(model="hash-256", input="the quick brown fox", encoding_format="base64")
    decoded = np.frombuffer(base64.b64decode(as_base64.data[0].embedding), dtype="<f4")
    assert np.allclose(decoded, first, atol=1e-6)
    assert result.usage.prompt_tokens > 0


def test_an_unknown_embedding_model_is_model_not_found(client):
    with pytest.raises(openai.NotFoundError) as caught:
        client.embeddings.create(model="text-embedding-3-small", input="x")
    assert caught.value.code == "model_not_found"


def test_an_unknown_chat_model_is_model_not_found(client):
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "x"}])
    assert caught.value.code == "model_not_found"
    assert caught.value.body["type"] == "invalid_request_error"


@pytest.mark.parametrize("kwargs", [{"messages": []}, {"messages": [{"role": "wizard", "content": "x"}]},
                                    {"messages": [{"role": "user", "content": "x"}], "temperature": 5}])
def test_a_bad_request_raises_bad_request_error(client, kwargs):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="fake-model", **kwargs)
    assert caught.value.status_code == 400
    assert caught.value.body["type"] == "invalid_request_error"


def test_an_unreachable_upstream_is_a_502_not_a_broken_stream(client, fake_openai):
    from tests.fakes.llm import Drop

    fake_openai.script(Drop())
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="fake-model", stream=True, messages=[{"role": "user", "content": "x"}])
    assert caught.value.status_code == 502


def test_a_stream_disconnect_stops_the_upstream_request(compat_server, fake_openai):
    server, _ = compat_server
    fake_openai.script(Hang(text="thinking"))
    response = requests.post(f"{server.base_url}/v1/chat/completions", stream=True, timeout=10, json={
        "model": "fake-model", "stream": True, "messages": [{"role": "user", "content": "x"}]})
    lines = response.iter_lines()
    assert b'"role": "assistant"' in next(line for line in lines if line)
    assert b"thinking" in next(line for line in lines if line)
    response.close()
    fake_openai.wait_for_hangups_sync(1, timeout=1.0)


def test_token_mode_requires_a_dashboard_token(compat_server, fake_openai):
    server, headers = compat_server
    requests.patch(f"{server.base_url}/api/config", json={"compat_auth": "token"}, headers=headers,
                   timeout=10).raise_for_status()
    try:
        anonymous = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="placeholder", max_retries=0)
        with pytest.raises(openai.AuthenticationError):  # the list is what the caller may use: nothing
            anonymous.models.list()
        with pytest.raises(openai.AuthenticationError):
            anonymous.embeddings.create(model="hash-256", input="x")
        with pytest.raises(openai.AuthenticationError):
            anonymous.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "x"}])
        token = headers["Authorization"].split(" ", 1)[1]
        fake_openai.script(Text("welcome"))
        member = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=token, max_retries=0)
        reply = member.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "x"}])
        assert reply.choices[0].message.content == "welcome"
        assert "default/fake-model" in [model.id for model in member.models.list()]
    finally:
        requests.patch(f"{server.base_url}/api/config", json={"compat_auth": "local"}, headers=headers,
                       timeout=10).raise_for_status()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", ["fake-model", "agent"])
def test_a_message_over_32000_characters_is_message_too_long_and_nothing_goes_upstream(client, fake_openai, stream,
                                                                                        model):
    parts = [{"type": "text", "text": "x" * 20_000}, {"type": "text", "text": "y" * 13_000}]
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": parts}]
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=model, stream=stream, messages=messages)
    assert caught.value.code == "message_too_long"
    assert caught.value.body["param"] == "messages[1].content"
    assert fake_openai.requests == []


def test_a_message_of_exactly_32000_characters_is_accepted(client, fake_openai):
    fake_openai.script(Text("fine"))
    completion = client.chat.completions.create(model="fake-model",
                                                messages=[{"role": "user", "content": "z" * 32_000}])
    assert completion.choices[0].message.content == "fine"


def test_history_tool_arguments_that_are_not_an_object_are_passed_on_as_an_empty_object(client, fake_openai):
    fake_openai.script(Text("ok"))
    client.chat.completions.create(model="fake-model", messages=[
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "[1, 2]"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"}])
    sent = fake_openai.requests[-1].json()["messages"][1]
    assert sent["tool_calls"][0]["function"]["arguments"] == "{}"

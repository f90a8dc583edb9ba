"""What a client sends reaches the upstream, and what the upstream answers reaches the client: a real daphne
server in front of a llama.cpp-like fake upstream (no usage in streams, 400 `context_length_exceeded` for a
long prompt, `content: null` refused), driven by the official openai and anthropic SDKs with their default
retries, and the fake's request log as the witness of what went upstream."""

from __future__ import annotations

import anthropic
import openai
import pytest
import requests

from tests.e2e import server_with_fake_upstream, sse_events
from tests.fakes.llm import FakeLlamaCpp

pytestmark = pytest.mark.e2e

LONG = "word " * 1000  # over the fake's context (2000 characters)


@pytest.fixture(scope="module")
def llama_server():
    with FakeLlamaCpp() as fake:
        yield fake


@pytest.fixture(scope="module")
def live(llama_server):
    server, headers = server_with_fake_upstream(llama_server)
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
    from tests.fakes.llm import Error

    llama.script(Error(503, "loading model"))
    client = oai.with_options(max_retries=0)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "hi"}])
    assert (caught.value.status_code, caught.value.code) == (502, "upstream_error")

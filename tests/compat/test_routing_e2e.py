"""The issue-26 scenario on a real daphne server with the official openai SDK: two connections on loopback fakes,
an alias `smart` = [hosted, local] with fallback, the hosted fake stopped; /v1 (plain and streamed) and the agent
keep answering from the local one, and the response names the model that answered."""

from __future__ import annotations

import openai
import pytest
import requests

from tests.e2e import server_with_fake_upstream
from tests.fakes.llm import Echo, Error, FakeOpenAI, StreamError

pytestmark = pytest.mark.e2e


@pytest.fixture
def scenario(fake_openai_server):
    local = FakeOpenAI(default_reply=Echo("local: ")).start()
    hosted = FakeOpenAI(default_reply=Echo("hosted: ")).start()
    server, headers = server_with_fake_upstream(fake_openai_server, AGENTSITE_UPSTREAM_COOLDOWN_S="30")
    try:
        def post(path, body):
            response = requests.post(f"{server.base_url}{path}", json=body, headers=headers, timeout=10)
            assert response.status_code == 201, response.text
            return response.json()

        local.models = ["llama3"]
        post("/api/connections", {"name": "local", "provider": "openai", "base_url": local.base_url,
                                  "models": "discover"})
        post("/api/connections", {"name": "hosted", "provider": "openai", "base_url": hosted.base_url,
                                  "api_key": "sk-hosted", "models": ["gpt-big"]})
        post("/api/aliases", {"name": "smart", "strategy": "fallback",
                              "targets": [{"model": "hosted/gpt-big"}, {"model": "local/llama3"}]})
        requests.patch(f"{server.base_url}/api/config", json={"model": "smart"}, headers=headers,
                       timeout=10).raise_for_status()
        client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="placeholder", max_retries=0)
        yield server, headers, client, hosted, local
    finally:
        server.stop()
        local.stop()
        hosted.stop()


def test_an_alias_answers_from_the_hosted_model_then_falls_back_when_it_stops(scenario):
    server, headers, client, hosted, local = scenario
    ids = [model.id for model in client.models.list()]
    assert ids[:1] == ["smart"] and {"hosted/gpt-big", "local/llama3", "default/fake-model"} <= set(ids)

    raw = client.chat.completions.with_raw_response.create(model="smart", messages=[{"role": "user", "content": "hi"}])
    assert raw.headers["x-agentsite-upstream"] == "hosted/gpt-big"
    completion = raw.parse()
    assert completion.model == "hosted/gpt-big" and completion.choices[0].message.content == "hosted: hi"
    assert hosted.bodies()[-1]["model"] == "gpt-big"

    hosted.stop()  # the hosted upstream goes away: connection refused
    raw = client.chat.completions.with_raw_response.create(model="smart", messages=[{"role": "user", "content": "hi"}])
    assert raw.headers["x-agentsite-upstream"] == "local/llama3"
    assert "hosted/gpt-big=failed" in raw.headers["x-agentsite-attempts"]
    completion = raw.parse()
    assert completion.model == "local/llama3" and completion.choices[0].message.content == "local: hi"

    stream = client.chat.completions.create(model="smart", stream=True,
                                            messages=[{"role": "user", "content": "streamed"}])
    chunks = list(stream)
    assert {chunk.model for chunk in chunks} == {"local/llama3"}
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices) == "local: streamed"

    # The agent (config model `smart`) goes through the same router.
    agent = client.chat.completions.create(model="agent", messages=[{"role": "user", "content": "as the agent"}])
    assert agent.choices[0].message.content == "local: as the agent"

    # A workflow's llm node naming the alias goes through the same router.
    workflow = requests.post(f"{server.base_url}/api/workflows", headers=headers, timeout=10, json={
        "name": "routed", "nodes": [{"id": "in", "name": "in", "type": "input", "config": {}},
                                    {"id": "ask", "name": "ask", "type": "llm",
                                     "config": {"prompt": "wf ${in}", "model": "smart"}},
                                    {"id": "out", "name": "out", "type": "output", "config": {}}],
        "edges": [{"from": "in", "to": "ask"}, {"from": "ask", "to": "out"}]})
    assert workflow.status_code == 201, workflow.text
    run = requests.post(f"{server.base_url}/api/workflows/{workflow.json()['id']}/run", headers=headers, timeout=30,
                        json={"input": "go"}).json()
    assert (run["status"], run["output"]) == ("success", "local: wf go"), run

    # A direct entry answers as itself, and its model keeps the name asked for.
    direct = client.chat.completions.create(model="local/llama3", messages=[{"role": "user", "content": "x"}])
    assert direct.model == "local/llama3" and direct.choices[0].message.content == "local: x"


def test_a_4xx_from_the_first_target_is_returned_with_its_status_and_no_fallback_happens(scenario):
    _server, _headers, client, hosted, local = scenario
    hosted.script(Error(400, "The model gpt-big does not take this request.", "invalid_request_error"))
    before = len(local.requests)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="smart", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 400 and "does not take this request" in caught.value.message
    assert len(local.requests) == before


def test_an_unknown_model_is_a_404_naming_it(scenario):
    _server, _headers, client, _hosted, _local = scenario
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="ghost/model", messages=[{"role": "user", "content": "hi"}])
    assert "ghost/model" in caught.value.message


def test_the_first_streamed_token_ends_fallback(scenario):
    _server, _headers, client, hosted, local = scenario


    hosted.script(StreamError(text="half an answer ", message="Overloaded."))
    before = len(local.requests)
    stream = client.chat.completions.create(model="smart", stream=True, messages=[{"role": "user", "content": "q"}])
    seen = []
    with pytest.raises(openai.APIError):
        for chunk in stream:
            seen.append(chunk.choices[0].delta.content or "" if chunk.choices else "")
    assert "".join(seen).startswith("half")
    assert len(local.requests) == before


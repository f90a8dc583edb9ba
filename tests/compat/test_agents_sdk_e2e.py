"""The OpenAI Agents SDK (`openai-agents`) as a client, unchanged (issue 29 item 4): an agent with a function tool
runs against the server's /v1/responses (its OpenAIResponsesModel, the SDK's default) and again against
/v1/chat/completions (its OpenAIChatCompletionsModel), over an OpenAI-format and an Anthropic-format upstream."""

from __future__ import annotations

import json

import agents
import pytest
import requests

from tests.e2e import server_with_fake_upstream
from tests.fakes.llm import Call, Text, ToolCalls

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def agents_server(fake_openai_server, fake_anthropic_server):
    server, headers = server_with_fake_upstream(fake_openai_server)
    created = requests.post(f"{server.base_url}/api/connections", headers=headers, timeout=10, json={
        "name": "claude", "provider": "anthropic", "base_url": fake_anthropic_server.base_url, "api_key": "sk-ant",
        "models": ["claude-x"]})
    assert created.status_code == 201, created.text
    agents.set_tracing_disabled(True)  # the SDK would send traces to api.openai.com
    yield server
    server.stop()


@pytest.mark.parametrize("door", ["responses", "chat_completions"])
@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_an_agent_with_a_function_tool(agents_server, fake_openai, fake_anthropic, door, wire):
    from openai import AsyncOpenAI

    fake, model_name = (fake_openai, "fake-model") if wire == "openai" else (fake_anthropic, "claude/claude-x")
    called = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        called.append(city)
        return f"sunny in {city}"

    client = AsyncOpenAI(base_url=f"{agents_server.base_url}/v1", api_key="placeholder", max_retries=0)
    model_class = agents.OpenAIResponsesModel if door == "responses" else agents.OpenAIChatCompletionsModel
    agent = agents.Agent(name="weather", instructions="Answer with the tool.", tools=[get_weather],
                         model=model_class(model=model_name, openai_client=client))
    fake.script(ToolCalls([Call("get_weather", {"city": "Oslo"}, id="call_w")]), Text("It is sunny in Oslo."))

    result = agents.Runner.run_sync(agent, "What is the weather in Oslo?")

    assert result.final_output == "It is sunny in Oslo."
    assert called == ["Oslo"]
    first, second = fake.bodies()
    assert "get_weather" in json.dumps(first["tools"]) and "Answer with the tool." in json.dumps(first)
    assert "sunny in Oslo" in json.dumps(second["messages"])


def test_the_sdks_multiprovider_reaches_a_connection_model_name_with_model_id_prefix_mode(agents_server,
                                                                                           fake_anthropic):
    from agents.models.multi_provider import MultiProvider

    provider = MultiProvider(openai_base_url=f"{agents_server.base_url}/v1", openai_api_key="placeholder",
                             unknown_prefix_mode="model_id")
    agent = agents.Agent(name="plain", instructions="Be brief.", model="claude/claude-x")
    fake_anthropic.script(Text("Hello from claude-x."))

    result = agents.Runner.run_sync(agent, "Hello", run_config=agents.RunConfig(model_provider=provider))

    assert result.final_output == "Hello from claude-x."
    assert fake_anthropic.bodies()[0]["model"] == "claude-x"

"""Usage by agent on a real server (issue 45, item 7): an agent made with POST /api/agents and called through
/v1/chat/completions as `agent:<slug>` (streamed and not) is what /api/usage?group_by=agent shows, apart from
the same user's plain-model calls and the deployment's agent (`agent`: the agent `default`), as the fake upstream
counted them."""

from __future__ import annotations

import openai
import pytest
import requests

from tests.e2e import poll, server_with_fake_upstream
from tests.fakes.llm import Text

pytestmark = pytest.mark.e2e

PASSWORD = "a-long-enough-password-1"


@pytest.fixture(scope="module")
def live(fake_openai_server):
    server, headers = server_with_fake_upstream(fake_openai_server, AGENTSITE_USAGE_FLUSH_S="0.2")
    yield server, headers
    server.stop()


def _usage(server, headers, **query) -> dict:
    response = requests.get(f"{server.base_url}/api/usage", params=query, headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def test_an_agents_calls_through_v1_are_its_usage(live, fake_openai):
    server, admin = live
    registered = requests.post(f"{server.base_url}/api/auth/register", timeout=10,
                               json={"username": "agent-user", "password": PASSWORD})
    assert registered.status_code == 201, registered.text
    headers = {"Authorization": f"Bearer {registered.json()['token']}"}
    made = requests.post(f"{server.base_url}/api/agents", headers=headers, timeout=10, json={
        "slug": "helpdesk", "name": "Helpdesk", "instructions": "You answer for the helpdesk."})
    assert made.status_code == 201, made.text
    key = requests.post(f"{server.base_url}/api/keys", json={"name": "sdk", "scopes": ["v1", "api"]},
                        headers=headers, timeout=10)
    assert key.status_code == 201, key.text
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=key.json()["key"], max_retries=0)
    fake_openai.script(Text("first", usage=(11, 3)), Text("second", usage=(13, 5)), Text("plain", usage=(2, 1)),
                       Text("deployment", usage=(4, 4)))
    whole = client.chat.completions.create(model="agent:helpdesk", messages=[{"role": "user", "content": "hi"}])
    assert whole.choices[0].message.content == "first"
    streamed = client.chat.completions.create(model="agent:helpdesk", stream=True,
                                              messages=[{"role": "user", "content": "again"}])
    assert "".join(chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices) == "second"
    plain = client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "plain"}])
    assert plain.choices[0].message.content == "plain"
    # The witness: the agent's calls carried its instructions first; the plain call did not.
    bodies = fake_openai.bodies()[-3:]
    assert [body["messages"][0] for body in bodies[:2]] == [
        {"role": "system", "content": "You answer for the helpdesk."}] * 2
    assert all(message.get("content") != "You answer for the helpdesk." for message in bodies[2]["messages"])
    # `agent` is the deployment's agent, `default`: its usage is that agent's, not a plain model's.
    deployment = client.chat.completions.create(model="agent", messages=[{"role": "user", "content": "and you?"}])
    assert deployment.choices[0].message.content == "deployment"

    report = poll(lambda: (found := _usage(server, headers, group_by="agent"))["totals"]["requests"] == 4 and found,
                  "the four calls flushed")
    assert {row["agent"]: (row["requests"], row["prompt_tokens"], row["completion_tokens"])
            for row in report["results"]} == {"helpdesk": (2, 24, 8), "default": (1, 4, 4), None: (1, 2, 1)}
    # ?agent= keeps its calls only; the admin sees them among everyone's.
    assert _usage(server, headers, agent="helpdesk", group_by="facet")["results"] == [
        {"facet": "v1", "requests": 2, "prompt_tokens": 24, "completion_tokens": 8, "total_tokens": 32, "cost": 0.0}]
    everyone = {row["agent"]: row["requests"] for row in _usage(server, admin, group_by="agent")["results"]}
    assert everyone["helpdesk"] == 2

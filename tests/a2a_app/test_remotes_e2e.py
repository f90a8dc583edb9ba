"""End to end: a live `serve` (its default workers) registers a remote A2A agent over HTTP, and a /v1 call of the
`agent` model (the fake upstream scripting the tool call) asks it through a2a_<name>; a user outside the
remote's rule is offered no such tool."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from tests.a2a_app.remote_agent import RemoteAgent, Served
from tests.e2e import UPSTREAM_KEY
from tests.fakes.llm import Call, Text, ToolCalls
from tests.server import LiveServer

pytestmark = pytest.mark.e2e  # starts a server process

PASSWORD = "correct-horse-battery-9"


@pytest.fixture(scope="module")
def site(fake_openai_server) -> Iterator[tuple[LiveServer, dict[str, str], Served]]:
    remote = Served(RemoteAgent(name="Live echo", streaming=True)).start()
    server = LiveServer(env={"AGENTSITE_LOGIN_RATE_LIMIT": "1000", "AGENTSITE_ALLOW_PRIVATE_FETCH": "1"}).start()
    try:
        headers = {"Authorization": f"Bearer {server.login()['token']}"}
        requests.patch(f"{server.base_url}/api/config", headers=headers, timeout=10, json={
            "provider": "openai", "base_url": fake_openai_server.base_url, "api_key": UPSTREAM_KEY,
            "model": "fake-model", "kb_enabled": False}).raise_for_status()
        yield server, headers, remote
    finally:
        server.stop()
        remote.stop()


def test_a_remote_registered_over_http_answers_a_v1_agent_call_through_its_tool(site, fake_openai):
    server, headers, remote = site
    registered = requests.post(f"{server.base_url}/api/a2a/remotes", headers=headers, timeout=30, json={
        "name": "live", "url": remote.agent.base_url, "headers": {"X-Key": "live-k"}})
    assert registered.status_code == 201, registered.text
    assert registered.json()["tool"] == "a2a_live" and "live-k" not in registered.text

    fake_openai.script(ToolCalls([Call("a2a_live", {"message": "hello heron"}, id="call_1")]), Text("It said hi."))
    answer = requests.post(f"{server.base_url}/v1/chat/completions", headers=headers, timeout=60, json={
        "model": "agent", "messages": [{"role": "user", "content": "Ask the live agent."}]})
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == "It said hi."
    second = fake_openai.bodies()[1]
    tool_message = next(message for message in second["messages"] if message["role"] == "tool")
    assert tool_message["content"] == "echo: hello heron"
    assert remote.agent.headers and all(seen["x-key"] == "live-k" for seen in remote.agent.headers)

    user = requests.post(f"{server.base_url}/api/auth/register", timeout=10,
                         json={"username": "a2a-outsider", "password": PASSWORD})
    assert user.status_code == 201, user.text
    outsider = {"Authorization": f"Bearer {user.json()['token']}"}
    assert requests.get(f"{server.base_url}/api/a2a/remotes", headers=outsider, timeout=10).json() == {"remotes": []}
    fake_openai.script(Text("No such tool."))
    requests.post(f"{server.base_url}/v1/chat/completions", headers=outsider, timeout=60, json={
        "model": "agent", "messages": [{"role": "user", "content": "Ask the live agent."}]}).raise_for_status()
    offered = [tool["function"]["name"] for tool in fake_openai.bodies()[-1].get("tools", [])]
    assert "a2a_live" not in offered and offered  # the built-ins are offered, the remote is not

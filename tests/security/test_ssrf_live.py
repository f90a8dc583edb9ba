"""The private-address guard of web_fetch through the real doors of a live server, with private fetches off
(the shipped default): `/api/mcp/call`, the chat stream, `/v1`'s agent and a workflow tool node. The offline
provider runs a tool when the message asks for it (`/tool web_fetch {...}`), so the request a user sends
reaches the guard just as a model's tool call would.

The target is a real loopback web server (tests/fakes/web.py) serving a secret: a guard that let a fetch
through would show the secret and leave a request in the fake's log. Every other live server in the suite
runs with AGENTSITE_ALLOW_PRIVATE_FETCH=1 (its fakes live on loopback); this one never does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import requests

from tests.e2e import sse_events
from tests.server import LiveServer

pytestmark = pytest.mark.e2e

SECRET = "internal-only: the launch code is PAPAYA"


@pytest.fixture(scope="module")
def guarded() -> Iterator[tuple[LiveServer, dict[str, str]]]:
    server = LiveServer(command="daphne", env={"AGENTSITE_LOGIN_RATE_LIMIT": "1000"})
    assert "AGENTSITE_ALLOW_PRIVATE_FETCH" not in server.env(), "the shipped default: private fetches off"
    server.start()
    try:
        yield server, {"Authorization": f"Bearer {server.login()['token']}"}
    finally:
        server.stop()


def private_urls(fake_web) -> list[str]:
    """The fake's secret page under several spellings of a loopback or private address."""
    port = fake_web.port
    return [fake_web.url("/secret"), f"http://localhost:{port}/secret", f"http://[::ffff:127.0.0.1]:{port}/secret",
            f"http://2130706433:{port}/secret", f"http://0.0.0.0:{port}/secret"]


@pytest.fixture
def secret_page(fake_web):
    fake_web.page("/secret", f"<html><body><p>{SECRET}</p></body></html>")
    yield fake_web
    assert fake_web.requests == [], "a private address was fetched through the server"


def assert_refused(text: str) -> None:
    assert SECRET not in text
    assert "Refusing to fetch" in text and "AGENTSITE_ALLOW_PRIVATE_FETCH" in text, text


def test_the_api_tool_call_refuses_private_addresses(guarded, secret_page):
    server, headers = guarded
    for url in private_urls(secret_page):
        response = requests.post(f"{server.base_url}/api/mcp/call", headers=headers, timeout=30, json={
            "server": "builtin", "tool": "web_fetch", "arguments": {"url": url}})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["is_error"] is True, (url, body)
        assert_refused(json.dumps(body))


def test_a_chat_turn_that_asks_for_a_private_address_gets_the_refusal(guarded, secret_page):
    server, headers = guarded
    session = requests.post(f"{server.base_url}/api/sessions", headers=headers, json={"name": "ssrf"}, timeout=10)
    assert session.status_code == 201, session.text
    url = secret_page.url("/secret")
    with requests.post(f"{server.base_url}/api/sessions/{session.json()['id']}/chat", headers=headers, timeout=30,
                       stream=True, json={"message": f'/tool web_fetch {{"url": "{url}"}}'}) as response:
        assert response.status_code == 200, response.text
        events = [(name, data) for name, data in sse_events(response) if name != "comment"]
    names = [name for name, _ in events]
    assert names[0] == "start" and names[-1] == "done", names
    assert names.index("tool_call") < names.index("tool_result")
    result = dict(events)["tool_result"]
    assert result["is_error"] is True
    assert_refused(result["content"])
    assert_refused(events[-1][1]["content"])  # the reply reports the refusal, never the page


@pytest.mark.parametrize("stream", [False, True])
def test_the_v1_agent_refuses_private_addresses(guarded, secret_page, stream):
    server, headers = guarded
    token = headers["Authorization"].removeprefix("Bearer ")  # a dashboard token: the agent gets its tools
    url = secret_page.url("/secret")
    response = requests.post(f"{server.base_url}/v1/chat/completions", timeout=30, stream=stream,
                             headers={"Authorization": f"Bearer {token}"}, json={
                                 "model": "agent", "stream": stream,
                                 "messages": [{"role": "user", "content": f'/tool web_fetch {{"url": "{url}"}}'}]})
    assert response.status_code == 200, response.text
    if stream:
        lines = [line for line in response.iter_lines(decode_unicode=True) if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]", lines[-3:]
        chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
        text = "".join(chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks if chunk["choices"])
    else:
        text = response.json()["choices"][0]["message"]["content"]
    assert_refused(text)
    assert "The tool web_fetch failed" in text  # the tool ran and was refused: not merely unavailable


def test_a_workflow_tool_node_that_fetches_a_private_address_fails_with_the_refusal(guarded, secret_page):
    server, headers = guarded
    created = requests.post(f"{server.base_url}/api/workflows", headers=headers, timeout=10, json={
        "name": "ssrf-tool-node",
        "nodes": [{"id": "start", "name": "start", "type": "input", "config": {}},
                  {"id": "fetch", "name": "fetch", "type": "tool",
                   "config": {"toolName": "web_fetch", "toolArgs": {"url": "${input}"}}},
                  {"id": "out", "name": "out", "type": "output", "config": {}}],
        "edges": [{"from": "start", "to": "fetch"}, {"from": "fetch", "to": "out"}]})
    assert created.status_code == 201, created.text
    run = requests.post(f"{server.base_url}/api/workflows/{created.json()['id']}/run", headers=headers, timeout=30,
                        json={"input": secret_page.url("/secret")})
    assert run.status_code in (200, 201), run.text
    body = run.json()
    assert body["status"] == "error", body
    assert_refused(json.dumps(body))

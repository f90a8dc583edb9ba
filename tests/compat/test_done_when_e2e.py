"""Issue 26's "Done when", on a real server (`serve`: daphne and the task cluster) with two fake upstreams on
loopback: an admin adds an Ollama-style connection (OpenAI's wire format, models discovered) and an OpenAI-style
one through the API (tests/dashboard/test_connections.py drives the same through the dashboard), makes the alias
`smart` = [hosted, local] with fallback, and stops the hosted fake. Then a chat turn (a session whose model is
`smart`), a workflow run whose llm node names `smart` (sync, queued and streamed), a scheduled task naming it,
and the official OpenAI SDK on /v1 all keep answering, from the local upstream."""

from __future__ import annotations

import openai
import pytest
import requests

from tests.e2e import poll, sse_events
from tests.fakes.llm import Echo, FakeOpenAI
from tests.server import LiveServer

pytestmark = pytest.mark.e2e


@pytest.fixture
def scenario():
    local = FakeOpenAI(default_reply=Echo("local: ")).start()
    hosted = FakeOpenAI(default_reply=Echo("hosted: ")).start()
    server = LiveServer(env={"AGENTSITE_LOGIN_RATE_LIMIT": "1000", "AGENTSITE_UPSTREAM_COOLDOWN_S": "30"}).start()
    try:
        headers = {"Authorization": f"Bearer {server.login()['token']}"}

        def call(method: str, path: str, body=None, expect: int = 200):
            response = requests.request(method, f"{server.base_url}{path}", json=body, headers=headers, timeout=30)
            assert response.status_code == expect, f"{method} {path}: {response.status_code} {response.text}"
            return response.json() if response.content else None

        call.headers = headers
        yield server, call, hosted, local
    finally:
        server.stop()
        local.stop()
        hosted.stop()


def chat_turn(server: LiveServer, call, session_id: str, message: str) -> str:
    response = requests.post(f"{server.base_url}/api/sessions/{session_id}/chat", json={"message": message},
                             headers=call.headers, stream=True, timeout=30)
    assert response.status_code == 200, response.text
    events = [event for event in sse_events(response) if event[0] != "comment"]
    kind, data = events[-1]
    assert kind == "done", events
    return data["content"]


def test_chat_workflows_the_scheduler_and_v1_keep_answering_from_the_local_upstream(scenario):
    server, call, hosted, local = scenario
    local.models = ["llama3.2", "qwen2.5"]  # what the Ollama-style upstream lists at GET /v1/models

    # The operator's setup: two connections, the alias, and what uses it.
    discovered = call("POST", "/api/connections", {"name": "local", "provider": "openai", "base_url": local.base_url,
                                                   "models": "discover"}, expect=201)
    assert discovered["discovered"] == ["llama3.2", "qwen2.5"] and discovered["discovery_error"] == ""
    call("POST", "/api/connections", {"name": "hosted", "provider": "openai", "base_url": hosted.base_url,
                                      "api_key": "sk-hosted", "models": ["gpt-4o"]}, expect=201)
    call("POST", "/api/aliases", {"name": "smart", "strategy": "fallback",
                                  "targets": [{"model": "hosted/gpt-4o"}, {"model": "local/llama3.2"}]}, expect=201)
    names = [entry["name"] for entry in call("GET", "/api/models")["models"]]
    assert {"smart", "hosted/gpt-4o", "local/llama3.2", "local/qwen2.5"} <= set(names)
    session = call("POST", "/api/sessions", {"name": "smart chat", "model": "smart"}, expect=201)
    nodes = [{"id": "in", "type": "input", "name": "in"},
             {"id": "ask", "type": "llm", "name": "ask", "config": {"prompt": "${in}", "model": "smart"}},
             {"id": "out", "type": "output", "name": "out"}]
    workflow = call("POST", "/api/workflows", {"name": "ask-smart", "nodes": nodes,
                                               "edges": [{"from": "in", "to": "ask"}, {"from": "ask", "to": "out"}]},
                    expect=201)
    task = call("POST", "/api/scheduler/tasks", {"name": "smart task", "cron": "0 0 1 1 *", "prompt": "task prompt",
                                                 "model": "smart"}, expect=201)
    # Unknown names are refused where they are chosen, naming them.
    refused = call("POST", "/api/sessions", {"model": "nope"}, expect=400)
    assert "'nope'" in refused["error"]["message"]

    # While both are up, the hosted one answers (the alias's first target).
    assert chat_turn(server, call, session["id"], "first") == "hosted: first"
    assert hosted.bodies()[-1]["model"] == "gpt-4o"

    hosted.stop()  # the hosted upstream goes away: its connections are refused from now on

    # A chat turn.
    assert chat_turn(server, call, session["id"], "after the outage") == "local: after the outage"
    assert local.bodies()[-1]["model"] == "llama3.2"

    # A workflow: sync, queued (the task cluster runs it), streamed.
    run = call("POST", f"/api/workflows/{workflow['id']}/run", {"input": "sync run"})
    assert (run["status"], run["output"]) == ("success", "local: sync run")
    queued = call("POST", f"/api/workflows/{workflow['id']}/run", {"input": "queued run", "async": True}, expect=202)
    finished = poll(lambda: (lambda r: r if r["status"] not in ("queued", "running") else None)(
        call("GET", f"/api/workflows/runs/{queued['id']}")), "the queued run to finish", timeout=30)
    assert (finished["status"], finished["output"]) == ("success", "local: queued run")
    streamed = requests.post(f"{server.base_url}/api/workflows/{workflow['id']}/run", stream=True, timeout=30,
                             json={"input": "streamed run", "stream": True}, headers=call.headers)
    events = [event for event in sse_events(streamed) if event[0] != "comment"]
    deltas = "".join(data["content"] for kind, data in events if kind == "delta")
    assert events[-1][0] == "done" and deltas == "local: streamed run", events
    assert events[-1][1]["run"]["output"] == "local: streamed run"

    # A scheduled task naming the alias, run now (the task cluster runs it).
    run = call("POST", f"/api/scheduler/run/{task['id']}", expect=202)
    history = poll(lambda: [item for item in call("GET", f"/api/scheduler/history?task={task['id']}")["results"]
                            if item["id"] == run["id"] and item["status"] not in ("queued", "running")],
                   "the task run to finish", timeout=30)
    assert (history[0]["status"], history[0]["output"]) == ("success", "local: task prompt")

    # The official OpenAI SDK on /v1.
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="placeholder", max_retries=0)
    assert "smart" in [model.id for model in client.models.list()]
    completion = client.chat.completions.create(model="smart", messages=[{"role": "user", "content": "via the SDK"}])
    assert completion.model == "local/llama3.2" and completion.choices[0].message.content == "local: via the SDK"
    chunks = list(client.chat.completions.create(model="smart", stream=True,
                                                 messages=[{"role": "user", "content": "streamed SDK"}]))
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices) == "local: streamed SDK"
    assert {chunk.model for chunk in chunks} == {"local/llama3.2"}
    assert [body["model"] for body in local.bodies()] == ["llama3.2"] * 7

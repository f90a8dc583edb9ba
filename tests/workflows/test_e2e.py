"""Workflows against a real server: streamed runs, hang-ups cancelling runs, the /v1 model through the official
openai SDK, the tool through the official mcp client, and queued runs through the real task cluster."""

from __future__ import annotations

import threading

import openai
import pytest
import requests
from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

from tests.e2e import poll, server_with_fake_upstream, sse_events
from tests.fakes.llm import Hang, Text
from tests.server import LiveServer
from tests.workflows.conftest import graph, node

pytestmark = pytest.mark.e2e  # every test here starts a process

ASK = graph(node("start", "input"), node("ask", "llm", prompt="Answer: ${input}"),
            node("out", "output", outputFormat="text"), edges=[("start", "ask"), ("ask", "out")])


@pytest.fixture(scope="module")
def live(fake_openai_server):
    server, headers = server_with_fake_upstream(fake_openai_server, AGENTSITE_SSE_KEEPALIVE_S="5")
    yield server, headers
    server.stop()


def make(live, name: str, data: dict) -> dict:
    server, headers = live
    response = requests.post(f"{server.base_url}/api/workflows", json={"name": name, **data}, headers=headers,
                             timeout=10)
    assert response.status_code in (201, 409), response.text
    if response.status_code == 409:
        listed = requests.get(f"{server.base_url}/api/workflows", headers=headers, timeout=10).json()["results"]
        return next(item for item in listed if item["name"] == name)
    return response.json()


def runs_of(live, workflow_id: str) -> list[dict]:
    server, headers = live
    return requests.get(f"{server.base_url}/api/workflows/{workflow_id}/runs", headers=headers,
                        timeout=10).json()["results"]


def test_a_streamed_run_sends_every_event_in_order(live, fake_openai):
    server, headers = live
    workflow = make(live, "ask", ASK)
    fake_openai.script(Text("Forty two.", pieces=["Forty ", "two."]))
    with requests.post(f"{server.base_url}/api/workflows/{workflow['id']}/run", headers=headers, stream=True,
                       timeout=30, json={"input": "the question", "stream": True}) as response:
        assert response.status_code == 200 and response.headers["Content-Type"].startswith("text/event-stream")
        events = [(name, data) for name, data in sse_events(response) if name != "comment"]
    assert [name for name, _ in events] == [
        "run_started", "node_started", "node_finished", "node_started", "delta", "delta", "node_finished",
        "node_started", "node_finished", "done"]
    assert [data["content"] for name, data in events if name == "delta"] == ["Forty ", "two."]
    assert all(data["node"] == "ask" for name, data in events if name == "delta")
    finished = [data for name, data in events if name == "node_finished"]
    assert [(item["node"], item["status"], item["output"]) for item in finished] == [
        ("start", "success", "the question"), ("ask", "success", "Forty two."), ("out", "success", "Forty two.")]
    run = events[-1][1]["run"]
    assert run["id"] == events[0][1]["run_id"] and run["status"] == "success" and run["output"] == "Forty two."
    assert fake_openai.requests[-1].json()["messages"][-1]["content"] == "Answer: the question"


def test_hanging_up_on_a_streamed_run_cancels_it_and_its_llm_request(live, fake_openai):
    server, headers = live
    workflow = make(live, "ask", ASK)
    fake_openai.script(Hang(text="Thinking "))
    response = requests.post(f"{server.base_url}/api/workflows/{workflow['id']}/run", headers=headers,
                             stream=True, timeout=30, json={"input": "q", "stream": True})
    events = sse_events(response)
    run_id = next(events)[1]["run_id"]
    assert next(data for name, data in events if name == "delta")["content"] == "Thinking "
    response.close()
    fake_openai.wait_for_hangups_sync(1, timeout=2)
    run = poll(lambda: (found := requests.get(f"{server.base_url}/api/workflows/runs/{run_id}", headers=headers,
                                              timeout=10).json())["status"] == "cancelled" and found,
               "the run was stored cancelled")
    assert [(entry["node"], entry["status"]) for entry in run["trace"]] == [("start", "success"),
                                                                          ("ask", "cancelled")]


def test_hanging_up_on_a_synchronous_run_cancels_it(live, fake_openai):
    server, headers = live
    workflow = make(live, "ask", ASK)
    fake_openai.script(Hang(text="Thinking "))
    with pytest.raises(requests.exceptions.ReadTimeout):
        requests.post(f"{server.base_url}/api/workflows/{workflow['id']}/run", headers=headers, timeout=(5, 1),
                      json={"input": "q"})
    fake_openai.wait_for_hangups_sync(1, timeout=3)
    newest = poll(lambda: (runs := runs_of(live, workflow["id"])) and runs[0]["status"] == "cancelled" and runs[0],
                  "the synchronous run was stored cancelled")
    assert newest["error"]["message"]


def test_each_workflow_is_a_v1_model_for_a_caller_with_a_token(live, fake_openai):
    server, headers = live
    make(live, "echo", graph(node("start", "input"), node("out", "output"), edges=[("start", "out")]))
    token = headers["Authorization"].split()[1]
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=token, max_retries=0)
    assert "workflow:echo" in [model.id for model in client.models.list()]
    reply = client.chat.completions.create(model="workflow:echo", messages=[
        {"role": "system", "content": "ignored"}, {"role": "user", "content": "first"},
        {"role": "assistant", "content": "x"}, {"role": "user", "content": "ping"}])
    assert reply.choices[0].message.content == "ping" and reply.choices[0].finish_reason == "stop"
    streamed = client.chat.completions.create(model="workflow:echo", stream=True,
                                              messages=[{"role": "user", "content": "pong"}])
    assert "".join(chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices) == "pong"

    anonymous = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="placeholder", max_retries=0)
    assert not [model.id for model in anonymous.models.list() if model.id.startswith("workflow:")]
    with pytest.raises(openai.NotFoundError):
        anonymous.chat.completions.create(model="workflow:echo", messages=[{"role": "user", "content": "x"}])


async def test_each_workflow_is_an_mcp_tool(live):
    server, headers = live
    make(live, "echo", graph(node("start", "input"), node("out", "output"), edges=[("start", "out")]))
    async with create_mcp_http_client(headers=headers) as client, \
            streamable_http_client(f"{server.base_url}/mcp", http_client=client) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert "workflow__echo" in tools
        assert tools["workflow__echo"].input_schema["required"] == ["input"]
        result = await session.call_tool("workflow__echo", {"input": "through mcp"})
    assert not result.is_error and result.content[0].text == "through mcp"


def test_an_async_run_goes_through_the_real_task_cluster():
    server = LiveServer().start()  # manage.py serve: daphne and the django-q2 cluster
    try:
        headers = {"Authorization": f"Bearer {server.login()['token']}"}
        created = requests.post(f"{server.base_url}/api/workflows", headers=headers, timeout=10, json={
            "name": "later", **graph(node("start", "input"), node("wait", "delay", delayMs=50),
                                     node("out", "output"), edges=[("start", "wait"), ("wait", "out")])}).json()
        queued = requests.post(f"{server.base_url}/api/workflows/{created['id']}/run", headers=headers, timeout=10,
                               json={"input": "queued input", "async": True})
        assert queued.status_code == 202 and queued.json()["status"] == "queued"
        url = f"{server.base_url}/api/workflows/runs/{queued.json()['id']}"
        run = poll(lambda: (found := requests.get(url, headers=headers, timeout=10).json())["status"] == "success"
                   and found, "the cluster ran the queued run", timeout=30)
        assert run["output"] == "queued input" and [entry["node"] for entry in run["trace"]] == ["start", "wait", "out"]
    finally:
        server.stop()


def test_concurrent_streamed_runs_do_not_mix_their_events(live):
    server, headers = live
    workflow = make(live, "echo", graph(node("start", "input"), node("out", "output"), edges=[("start", "out")]))
    outputs: dict[int, str] = {}

    def stream(index: int) -> None:
        with requests.post(f"{server.base_url}/api/workflows/{workflow['id']}/run", headers=headers, stream=True,
                           timeout=30, json={"input": f"input {index}", "stream": True}) as response:
            done = [data for name, data in sse_events(response) if name == "done"]
        outputs[index] = done[0]["run"]["output"]

    threads = [threading.Thread(target=stream, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert outputs == {index: f"input {index}" for index in range(8)}

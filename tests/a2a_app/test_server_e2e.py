"""Every agent an A2A server, end to end (issue 50, item 1): `serve` with its default workers, the fake upstream as
the model, and the official a2a-sdk client (A2A 1.0) or raw JSON-RPC in the 0.3 dialect as the caller."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
import pytest
import requests
from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import (
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskState,
)

from tests.e2e import UPSTREAM_KEY, PinnedProcesses, poll
from tests.fakes.llm import Hang, Text
from tests.server import LiveServer

pytestmark = pytest.mark.e2e

SLUG = "helper-a2a"
INSTRUCTIONS = "You are the A2A helper. Answer in one line."


@pytest.fixture(scope="module")
def a2a_server(fake_openai_server):
    server = LiveServer(env={"AGENTSITE_LOGIN_RATE_LIMIT": "1000", "AGENTSITE_ALLOW_PRIVATE_FETCH": "1",
                             "AGENTSITE_WORKER_HEADER": "1"}).start()
    admin = {"Authorization": f"Bearer {server.login()['token']}"}
    requests.patch(f"{server.base_url}/api/config", headers=admin, timeout=10, json={
        "provider": "openai", "base_url": fake_openai_server.base_url, "api_key": UPSTREAM_KEY,
        "model": "fake-model"}).raise_for_status()
    _post(server, admin, "/api/agents", {"slug": SLUG, "name": "A2A helper", "description": "Answers questions.",
                                         "instructions": INSTRUCTIONS, "starters": ["What is A2A?"]})
    key = _post(server, admin, "/api/keys", {"name": "a2a", "scopes": ["a2a"]})["key"]
    v1_key = _post(server, admin, "/api/keys", {"name": "v1 only", "scopes": ["v1"]})["key"]
    yield {"server": server, "admin": admin, "key": key, "v1_key": v1_key}
    server.stop()


def _post(server: LiveServer, headers: dict[str, str], path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = requests.post(f"{server.base_url}{path}", json=body, headers=headers, timeout=10)
    assert response.status_code in (200, 201), response.text
    return response.json()


def _agent_url(server: LiveServer, slug: str = SLUG) -> str:
    return f"{server.base_url}/a2a/{slug}"


def _user(text: str, context_id: str = "") -> Message:
    return Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)],
                   context_id=context_id)


async def _client(world: dict[str, Any], *, streaming: bool) -> Any:
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {world['key']}"}, timeout=60)
    return await create_client(_agent_url(world["server"]), ClientConfig(streaming=streaming, httpx_client=http))


async def _send(client: Any, message: Message, **config: Any) -> list[Any]:
    request = SendMessageRequest(message=message, configuration=SendMessageConfiguration(**config))
    return [event async for event in client.send_message(request)]


def _reply_text(task: Any) -> str:
    return "".join(part.text for artifact in task.artifacts if artifact.name == "reply" for part in artifact.parts)


def test_the_card_says_who_the_agent_is_and_how_to_call_it(a2a_server):
    server = a2a_server["server"]
    url = f"{_agent_url(server)}/.well-known/agent-card.json"
    card = requests.get(url, headers={"Authorization": f"Bearer {a2a_server['key']}"}, timeout=10).json()
    assert card["name"] == "A2A helper" and card["description"] == "Answers questions." and card["version"] == "1"
    assert card["supportedInterfaces"] == [{"url": _agent_url(server), "protocolBinding": "JSONRPC",
                                            "protocolVersion": "1.0"}]
    assert card["capabilities"]["streaming"] is True
    assert card["defaultInputModes"] == card["defaultOutputModes"] == ["text/plain", "application/json"]
    assert [(skill["id"], skill["examples"]) for skill in card["skills"]] == [(SLUG, ["What is A2A?"])]
    assert set(card["securitySchemes"]) == {"bearer", "oauth2"}
    flow = card["securitySchemes"]["oauth2"]["oauth2SecurityScheme"]["flows"]["authorizationCode"]
    assert flow["authorizationUrl"] == f"{server.base_url}/oauth/authorize" and flow["scopes"] == {
        "a2a": "Use your agents over A2A, as you."}
    # Without a credential: 401 with a challenge naming where the resource's metadata is; the deployment's card
    # lists no agent by default.
    anonymous = requests.get(url, timeout=10)
    assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "not_authenticated"
    assert (f'resource_metadata="{server.base_url}/.well-known/oauth-protected-resource/a2a"'
            in anonymous.headers["WWW-Authenticate"])
    deployment = requests.get(f"{server.base_url}/.well-known/agent-card.json", timeout=10)
    assert deployment.status_code == 200 and deployment.json()["skills"] == []


def test_send_stream_get_and_a_follow_up_in_the_same_context(a2a_server, fake_openai):
    async def scenario() -> None:
        client = await _client(a2a_server, streaming=False)
        fake_openai.script(Text("The first answer."))
        [event] = await _send(client, _user("First question?"))
        task = event.task
        assert task.status.state == TaskState.TASK_STATE_COMPLETED and _reply_text(task) == "The first answer."
        first = fake_openai.requests[-1].json()["messages"]
        assert first[0]["role"] == "system" and INSTRUCTIONS in first[0]["content"]
        assert first[-1] == {"role": "user", "content": "First question?"}

        got = await client.get_task(GetTaskRequest(id=task.id))
        assert got.status.state == TaskState.TASK_STATE_COMPLETED and _reply_text(got) == "The first answer."

        streaming = await _client(a2a_server, streaming=True)
        fake_openai.script(Text("Second answer, streamed.", pieces=["Second ", "answer, ", "streamed."]))
        events = await _send(streaming, _user("And then?", context_id=task.context_id))
        kinds = [event.WhichOneof("payload") for event in events]
        assert kinds[0] == "task" and "artifact_update" in kinds and kinds[-1] == "status_update", kinds
        assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
        chunks = "".join(part.text for event in events if event.HasField("artifact_update")
                         for part in event.artifact_update.artifact.parts)
        assert chunks == "Second answer, streamed."
        follow_up = fake_openai.requests[-1].json()["messages"]
        assert [(m["role"], m["content"]) for m in follow_up[1:]] == [
            ("user", "First question?"), ("assistant", "The first answer."), ("user", "And then?")]

    asyncio.run(scenario())


def test_a_slow_task_is_cancelled_from_another_worker_and_the_upstream_sees_the_hang_up(a2a_server, fake_openai):
    server = a2a_server["server"]
    headers = {"Authorization": f"Bearer {a2a_server['key']}", "A2A-Version": "1.0"}
    pinned = PinnedProcesses((server,), session_headers=headers)
    first, second = pinned.processes[:2]
    fake_openai.script(Hang())
    sent = pinned.via(first, "POST", f"/a2a/{SLUG}", json={
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"messageId": "m-slow", "role": "ROLE_USER", "parts": [{"text": "Take your time."}]},
                   "configuration": {"returnImmediately": True}}})
    assert sent.status_code == 200, sent.text
    task = sent.json()["result"]["task"]
    task_id = task["id"]

    def state_via(pid: int) -> str:
        got = pinned.via(pid, "POST", f"/a2a/{SLUG}", json={"jsonrpc": "2.0", "id": 2, "method": "GetTask",
                                                              "params": {"id": task_id}})
        return got.json()["result"]["status"]["state"]

    poll(lambda: state_via(second) == "TASK_STATE_WORKING", "the task working, seen from the other worker")
    poll(lambda: fake_openai.requests, "the model's request made (and left hanging)", timeout=10)
    cancelled = pinned.via(second, "POST", f"/a2a/{SLUG}", json={"jsonrpc": "2.0", "id": 3, "method": "CancelTask",
                                                                  "params": {"id": task_id}})
    assert cancelled.json()["result"]["status"]["state"] == "TASK_STATE_CANCELED", cancelled.text
    # Within 3 s: the announcement stops the run at once (the running process's own look at the row, a fallback,
    # comes only every executor.CANCEL_POLL_CONNECTED_S = 10 s).
    asyncio.run(fake_openai.wait_for_hangups(1, timeout=3))
    assert state_via(first) == "TASK_STATE_CANCELED"
    again = pinned.via(first, "POST", f"/a2a/{SLUG}", json={"jsonrpc": "2.0", "id": 4, "method": "CancelTask",
                                                             "params": {"id": task_id}})
    assert again.json()["error"]["code"] == -32002, again.text  # TaskNotCancelable


def test_the_0_3_dialect_answers_message_send_on_the_same_endpoint(a2a_server, fake_openai):
    server = a2a_server["server"]
    fake_openai.script(Text("Old dialect works."))
    answer = requests.post(_agent_url(server), timeout=30, headers={"Authorization": f"Bearer {a2a_server['key']}"},
                           json={"jsonrpc": "2.0", "id": "x", "method": "message/send", "params": {"message": {
                               "kind": "message", "messageId": "m-03", "role": "user",
                               "parts": [{"kind": "text", "text": "Hello from 0.3"}]}}})
    result = answer.json()["result"]
    assert result["kind"] == "task" and result["status"]["state"] == "completed", answer.text
    assert result["artifacts"][0]["parts"][0]["text"] == "Old dialect works."


@pytest.mark.parametrize("who", ["nobody", "v1 key", "dead key", "not an agent"])
def test_refusals_before_the_sdk(a2a_server, who):
    server = a2a_server["server"]
    headers = {"nobody": {}, "v1 key": {"Authorization": f"Bearer {a2a_server['v1_key']}"},
               "dead key": {"Authorization": "Bearer ask-not-a-real-key-0000000000000000"},
               "not an agent": {"Authorization": f"Bearer {a2a_server['key']}"}}[who]
    slug = "no-such-agent" if who == "not an agent" else SLUG
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {
        "kind": "message", "messageId": "m", "role": "user", "parts": [{"kind": "text", "text": "hi"}]}}}
    answer = requests.post(_agent_url(server, slug), json=body, headers=headers, timeout=10)
    expected = {"nobody": (401, "not_authenticated"), "v1 key": (403, "key_scope"),
                "dead key": (401, "token_invalid"), "not an agent": (404, "not_found")}[who]
    assert (answer.status_code, answer.json()["error"]["code"]) == expected, answer.text
    if answer.status_code == 401:
        assert 'scope="a2a"' in answer.headers["WWW-Authenticate"]
    assert json.loads(answer.content)  # always JSON

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
    # The reply's chunks are the artifact's parts, in order (each streamed chunk appended).
    assert "".join(part["text"] for part in result["artifacts"][0]["parts"]) == "Old dialect works."


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


# --- who may call: OAuth, other users, sharing, model access, budgets -------------------------------------

def _register(server: LiveServer, username: str) -> dict[str, Any]:
    made = requests.post(f"{server.base_url}/api/auth/register", json={"username": username,
                                                                       "password": "a2a-pass-12345678"}, timeout=10)
    assert made.status_code == 201, made.text
    token = {"Authorization": f"Bearer {made.json()['token']}"}
    me = requests.get(f"{server.base_url}/api/auth/me", headers=token, timeout=10).json()
    key = _post(server, token, "/api/keys", {"name": "a2a", "scopes": ["a2a"]})["key"]
    return {"id": int(me["id"]), "token": token, "key": key}


def _rpc(server: LiveServer, key: str, method: str, params: dict[str, Any], slug: str = SLUG) -> requests.Response:
    return requests.post(_agent_url(server, slug), timeout=30, json={"jsonrpc": "2.0", "id": 1, "method": method,
                                                                      "params": params},
                         headers={"Authorization": f"Bearer {key}", "A2A-Version": "1.0"})


def _send_text(server: LiveServer, key: str, text: str, context_id: str = "", slug: str = SLUG,
               **config: Any) -> dict[str, Any]:
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}
    if context_id:
        message["contextId"] = context_id
    answer = _rpc(server, key, "SendMessage", {"message": message, "configuration": config}, slug=slug)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_an_oauth_token_for_a2a_calls_the_agent_and_one_for_mcp_does_not(a2a_server, fake_openai):
    from tests.oauthflow import authorized_tokens, registered_client

    server, admin = a2a_server["server"], a2a_server["admin"]
    for_a2a = authorized_tokens(server.base_url, registered_client(server.base_url, "a2a"),
                                f"{server.base_url}/a2a", admin)["access_token"]
    for_mcp = authorized_tokens(server.base_url, registered_client(server.base_url, "mcp"),
                                f"{server.base_url}/mcp", admin)["access_token"]
    fake_openai.script(Text("Through OAuth."))
    done = _send_text(server, for_a2a, "Hello over OAuth")["result"]["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "".join(part["text"] for part in done["artifacts"][0]["parts"]) == "Through OAuth."
    refused = _rpc(server, for_mcp, "GetTask", {"id": done["id"]})
    assert refused.status_code == 401 and 'error="invalid_token"' in refused.headers["WWW-Authenticate"]
    # The task is the user's, whichever credential made it: their API key reads it.
    got = _rpc(server, a2a_server["key"], "GetTask", {"id": done["id"]}).json()["result"]
    assert got["id"] == done["id"]


def test_another_caller_never_reaches_a_task_a_context_or_an_agent_not_shared_with_them(a2a_server, fake_openai):
    server, admin = a2a_server["server"], a2a_server["admin"]
    bob = _register(server, "bob-a2a")
    fake_openai.script(Text("The admin's secret answer."))
    mine = _send_text(server, a2a_server["key"], "The admin's secret question")["result"]["task"]
    # The agent is private to the admin who made it: 404 for bob, as for none at all.
    outsider = _rpc(server, bob["key"], "GetTask", {"id": mine["id"]})
    assert outsider.status_code == 404 and outsider.json()["error"]["code"] == "not_found"
    card = requests.get(f"{_agent_url(server)}/.well-known/agent-card.json", timeout=10,
                        headers={"Authorization": f"Bearer {bob['key']}"})
    assert card.status_code == 404

    agent = next(a for a in requests.get(f"{server.base_url}/api/agents", headers=admin, timeout=10).json()["results"]
                 if a["slug"] == SLUG)
    shared = requests.put(f"{server.base_url}/api/agents/{agent['id']}/access", headers=admin, timeout=10, json={
        "visibility": "shared", "grants": [{"user": bob["id"], "role": "viewer"}]})
    assert shared.status_code == 200, shared.text
    try:
        # A viewer uses it, but another caller's task is not theirs (the SDK's TaskNotFound, -32001) ...
        not_found = _rpc(server, bob["key"], "GetTask", {"id": mine["id"]}).json()
        assert not_found["error"]["code"] == -32001, not_found
        # ... nor is another caller's conversation: the same contextId starts bob's own.
        fake_openai.script(Text("Bob's answer."))
        bobs = _send_text(server, bob["key"], "Bob's question", context_id=mine["contextId"])["result"]["task"]
        assert bobs["status"]["state"] == "TASK_STATE_COMPLETED"
        sent = fake_openai.requests[-1].json()["messages"]
        assert [m["content"] for m in sent if m["role"] != "system"] == ["Bob's question"]
        assert "secret" not in json.dumps(sent)
        listed = _rpc(server, bob["key"], "ListTasks", {}).json()["result"]
        assert [task["id"] for task in listed["tasks"]] == [bobs["id"]]
    finally:
        requests.put(f"{server.base_url}/api/agents/{agent['id']}/access", headers=admin, timeout=10,
                     json={"visibility": "private", "grants": []}).raise_for_status()


def test_a_groups_model_list_and_a_spent_budget_refuse_before_the_agent_runs(a2a_server, fake_openai):
    server, admin = a2a_server["server"], a2a_server["admin"]
    carol = _register(server, "carol-a2a")
    default = "default"  # everyone's agent: carol may use it
    fake_openai.script(Text("Allowed."))
    allowed = _send_text(server, carol["key"], "hi", slug=default)["result"]["task"]
    assert allowed["status"]["state"] == "TASK_STATE_COMPLETED"
    group = _post(server, admin, "/api/groups", {"name": "a2a-narrow", "models": ["fast-nothing"]})
    _post(server, admin, f"/api/groups/{group['id']}/members", {"user": carol["id"]})
    try:
        refused = _rpc(server, carol["key"], "GetTask", {"id": "x"}, slug=default)
        assert (refused.status_code, refused.json()["error"]["code"]) == (403, "model_not_allowed"), refused.text
    finally:
        requests.delete(f"{server.base_url}/api/groups/{group['id']}", headers=admin, timeout=10).raise_for_status()
    budget = requests.put(f"{server.base_url}/api/users/{carol['id']}/budget", headers=admin, timeout=10,
                          json={"tokens_per_day": 0})
    assert budget.status_code == 200, budget.text
    spent = _rpc(server, carol["key"], "GetTask", {"id": "x"}, slug=default)
    assert spent.status_code == 429 and spent.json()["error"]["code"] == "budget_exceeded", spent.text

    def facets() -> list[str]:  # usage reaches the table within AGENTSITE_USAGE_FLUSH_S
        usage = requests.get(f"{server.base_url}/api/usage?group_by=facet&user={carol['id']}", headers=admin,
                             timeout=10).json()
        return [row["facet"] for row in usage["results"]]

    assert poll(facets, "carol's call recorded", timeout=10) == ["a2a"]


# --- parts in and out, and following a task from another worker -------------------------------------------

def test_a_file_part_reaches_the_model_as_an_upload_and_a_json_reply_is_also_a_data_artifact(a2a_server, fake_openai):
    import base64

    server, key = a2a_server["server"], a2a_server["key"]
    fake_openai.script(Text('{"word": "plum", "count": 2}'))
    note = base64.b64encode(b"The secret word is plum.").decode()
    answer = _rpc(server, key, "SendMessage", {"message": {
        "messageId": "m-file", "role": "ROLE_USER",
        "parts": [{"text": "What is the word?"}, {"raw": note, "filename": "note.txt", "mediaType": "text/plain"}]}})
    task = answer.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", answer.text
    sent = json.dumps(fake_openai.requests[-1].json()["messages"][-1])
    assert "What is the word?" in sent and "The secret word is plum." in sent and "note.txt" in sent
    data = [artifact for artifact in task["artifacts"] if artifact["name"] == "data"]
    assert [part["data"] for part in data[0]["parts"]] == [{"word": "plum", "count": 2}]
    uploads = requests.get(f"{server.base_url}/api/uploads", headers=a2a_server["admin"], timeout=10).json()
    assert "note.txt" in json.dumps(uploads)

    # A file by URL is not fetched: the task fails, naming the part, and the model is not asked.
    before = len(fake_openai.requests)
    by_url = _rpc(server, key, "SendMessage", {"message": {
        "messageId": "m-url", "role": "ROLE_USER", "parts": [{"text": "Read this"},
                                                            {"url": "http://127.0.0.1:9/file.txt"}]}})
    failed = by_url.json()["result"]["task"]
    assert failed["status"]["state"] == "TASK_STATE_FAILED"
    assert "parts.1" in failed["status"]["message"]["parts"][0]["text"]
    assert len(fake_openai.requests) == before


def test_a_task_is_followed_from_another_worker_to_its_end(a2a_server, fake_openai):
    server = a2a_server["server"]
    headers = {"Authorization": f"Bearer {a2a_server['key']}", "A2A-Version": "1.0"}
    pinned = PinnedProcesses((server,), session_headers=headers)
    first, second = pinned.processes[:2]
    pieces = [f"part {index} " for index in range(8)]
    fake_openai.script(Text("".join(pieces), pieces=pieces, delay=0.15))
    sent = pinned.via(first, "POST", f"/a2a/{SLUG}", json={
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"messageId": "m-follow", "role": "ROLE_USER", "parts": [{"text": "Go slowly."}]},
                   "configuration": {"returnImmediately": True}}})
    task_id = sent.json()["result"]["task"]["id"]
    followed = pinned.via(second, "POST", f"/a2a/{SLUG}", stream=True, json={
        "jsonrpc": "2.0", "id": 2, "method": "SubscribeToTask", "params": {"id": task_id}})
    assert followed.headers["Content-Type"].startswith("text/event-stream")
    from tests.e2e import sse_events

    results = [data["result"] for _name, data in sse_events(followed) if isinstance(data, dict) and "result" in data]
    text = "".join(part["text"] for result in results if "artifactUpdate" in result
                   for part in result["artifactUpdate"]["artifact"]["parts"])
    assert results[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED", results
    # Whatever the stream had sent before the follower came is in the task it gets first, the rest in updates.
    first_seen = results[0].get("task", {})
    before = "".join(part["text"] for artifact in first_seen.get("artifacts", []) for part in artifact["parts"])
    assert before + text == "".join(pieces)


def test_a_stream_ends_at_its_next_event_once_its_key_is_revoked(a2a_server, fake_openai):
    server, admin = a2a_server["server"], a2a_server["admin"]
    made = _post(server, admin, "/api/keys", {"name": "short-lived", "scopes": ["a2a"]})
    pieces = [f"word{index} " for index in range(30)]
    fake_openai.script(Text("".join(pieces), pieces=pieces, delay=0.2))
    with requests.post(_agent_url(server), stream=True, timeout=30, json={
            "jsonrpc": "2.0", "id": 7, "method": "SendStreamingMessage", "params": {"message": {
                "messageId": "m-revoked", "role": "ROLE_USER", "parts": [{"text": "Talk for a while."}]}}},
            headers={"Authorization": f"Bearer {made['key']}", "A2A-Version": "1.0"}) as response:
        from tests.e2e import sse_events

        seen: list[Any] = []
        for _name, data in sse_events(response):
            seen.append(data)
            if len(seen) == 3:  # the stream is flowing: revoke the key it came with
                revoked = requests.delete(f"{server.base_url}/api/keys/{made['id']}", headers=admin, timeout=10)
                assert revoked.status_code == 204
    last = seen[-1]
    assert last["id"] is None and last["error"]["data"]["code"] == "token_invalid", last
    words = "".join(part["text"] for data in seen if "result" in data and "artifactUpdate" in data["result"]
                    for part in data["result"]["artifactUpdate"]["artifact"]["parts"])
    assert len(words) < len("".join(pieces))  # it ended before the reply did

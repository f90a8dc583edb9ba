"""A chat session with a named agent, end to end: a daphne server, the chat SSE stream over a socket, the agent
and its collection made through the API, and the fake upstream as the witness (issue 45, items 4 and 5)."""

from __future__ import annotations

import pytest
import requests

from tests.e2e import server_with_fake_upstream, sse_events
from tests.fakes.llm import Call, Text, ToolCalls
from tests.sessions_app.test_agents import INSTRUCTIONS, PASSAGE, QUESTION, TOOL, UNLISTED, assert_agent_reached

pytestmark = pytest.mark.e2e  # every test here uses the live server its module's fixture starts


@pytest.fixture(scope="module")
def chat_server(fake_openai_server):
    server, headers = server_with_fake_upstream(fake_openai_server)
    yield server, headers
    server.stop()


def _post(server, headers, path, body):
    response = requests.post(f"{server.base_url}{path}", json=body, headers=headers, timeout=10)
    assert response.status_code in (200, 201), response.text
    return response.json()


def test_a_session_with_an_agent_streams_its_reply_with_the_agents_prompt_tool_and_knowledge(chat_server,
                                                                                              fake_openai):
    server, headers = chat_server
    collection = _post(server, headers, "/api/kb/collections", {"name": "hall-seven"})
    _post(server, headers, "/api/kb/documents", {"filename": "handbook.txt", "content": PASSAGE,
                                                 "collection": collection["id"]})
    agent = _post(server, headers, "/api/agents", {"slug": "support-e2e", "name": "Support",
                                                   "instructions": INSTRUCTIONS, "tools": [TOOL],
                                                   "knowledge": [collection["id"]]})
    session = _post(server, headers, "/api/sessions", {"name": "help", "agent": agent["slug"]})
    assert session["agent"] == "support-e2e"

    fake_openai.script(ToolCalls([Call(UNLISTED, {"query": "zorblat"}, id="call_1")]),
                       Text("Quintessence brine.", pieces=["Quintessence ", "brine."]))
    with requests.post(f"{server.base_url}/api/sessions/{session['id']}/chat", json={"message": QUESTION},
                       headers=headers, stream=True, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        events = [(name, data) for name, data in sse_events(response) if name != "comment"]
    names = [name for name, _ in events]
    assert names[:3] == ["start", "tool_call", "tool_result"] and names[-1] == "done", events
    refused = events[2][1]
    assert refused["is_error"] is True and f"There is no tool named {UNLISTED!r}" in refused["content"]
    assert events[-1][1]["content"].endswith("Quintessence brine.")

    first, second = (request.json() for request in fake_openai.requests[-2:])
    assert_agent_reached(first)
    assert_agent_reached(second)
    stored = requests.get(f"{server.base_url}/api/sessions/{session['id']}/messages", headers=headers,
                          timeout=10).json()["results"]
    assert [(m["role"], m["status"]) for m in stored] == [("user", "complete"), ("assistant", "complete")]
    assert [(call["name"], call["result"]["is_error"]) for call in stored[1]["tool_calls"]] == [(UNLISTED, True)]

    # A slug the caller may not use (none such) is 404 naming `agent`, before any session is made.
    missing = requests.post(f"{server.base_url}/api/sessions", json={"agent": "nobody"}, headers=headers, timeout=10)
    assert missing.status_code == 404 and "agent" in missing.json()["error"]["details"]

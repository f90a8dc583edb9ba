"""The chat SSE stream against a real daphne server and a fake upstream LLM on loopback."""

import pytest
import requests

from tests.e2e import UPSTREAM_KEY, poll, server_with_fake_upstream, sse_events
from tests.fakes.llm import Call, Error, Hang, StreamError, Text, ToolCalls

pytestmark = pytest.mark.e2e  # every test here uses a live server its module's fixture starts


@pytest.fixture(scope="module")
def chat_server(fake_openai_server):
    server, headers = server_with_fake_upstream(fake_openai_server, AGENTSITE_SSE_KEEPALIVE_S="0.3")
    yield server, headers
    server.stop()


@pytest.fixture
def session(chat_server, fake_openai):
    server, headers = chat_server
    created = requests.post(f"{server.base_url}/api/sessions", json={"name": "e2e"}, headers=headers, timeout=10)
    return server, headers, created.json()["id"]


def _chat(server, headers, session_id, message, **kwargs):
    return requests.post(f"{server.base_url}/api/sessions/{session_id}/chat", json={"message": message},
                         headers=headers, stream=True, timeout=30, **kwargs)


def _messages(server, headers, session_id):
    return requests.get(f"{server.base_url}/api/sessions/{session_id}/messages", headers=headers,
                        timeout=10).json()["results"]


def test_chat_streams_start_deltas_done_and_stores_both_messages(session, fake_openai):
    server, headers, session_id = session
    fake_openai.script(Text("Hello there, my friend.", pieces=["Hello ", "there, ", "my ", "friend."]))
    with _chat(server, headers, session_id, "Say hello") as response:
        assert response.status_code == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        events = [(name, data) for name, data in sse_events(response) if name != "comment"]
    names = [name for name, _ in events]
    assert names == ["start", "delta", "delta", "delta", "delta", "done"]
    start, done = events[0][1], events[-1][1]
    assert start["session_id"] == session_id
    assert "".join(data["content"] for name, data in events if name == "delta") == "Hello there, my friend."
    assert done["message_id"] == start["message_id"]
    assert done["content"] == "Hello there, my friend."
    assert done["finish_reason"] == "stop"
    assert done["usage"] == {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}
    stored = _messages(server, headers, session_id)
    assert [(m["role"], m["content"], m["status"]) for m in stored] == [
        ("user", "Say hello", "complete"), ("assistant", "Hello there, my friend.", "complete")]
    assert stored[1]["id"] == start["message_id"]


def test_the_sessions_history_is_sent_to_the_agent(session, fake_openai):
    server, headers, session_id = session
    fake_openai.script(Text("First answer."), Text("Second answer."))
    for message in ("first question", "second question"):
        with _chat(server, headers, session_id, message) as response:
            list(sse_events(response))
    sent = fake_openai.requests[-1].json()["messages"]
    assert [(m["role"], m["content"]) for m in sent if m["role"] != "system"] == [
        ("user", "first question"), ("assistant", "First answer."), ("user", "second question")]
    assert sent[0]["role"] == "system"
    assert fake_openai.requests[-1].headers.get("authorization") == f"Bearer {UPSTREAM_KEY}"


def test_a_tool_round_streams_its_call_and_result_and_is_stored_with_the_turn(session, fake_openai, fake_web):
    server, headers, session_id = session
    fake_web.page("/facts", "<html><body><h1>Facts</h1><p>The answer is forty-two.</p></body></html>")
    fake_openai.script(ToolCalls([Call("web_fetch", {"url": fake_web.url("/facts")}, id="call_1")]),
                       Text("The page says forty-two."))
    with _chat(server, headers, session_id, "What does the page say?") as response:
        events = [(name, data) for name, data in sse_events(response) if name != "comment"]
    names = [name for name, _ in events]
    assert names[0] == "start" and names[-1] == "done"
    assert names.index("tool_call") < names.index("tool_result") < names.index("delta")
    call = dict(events)["tool_call"]
    result = dict(events)["tool_result"]
    assert call == {"id": "call_1", "name": "web_fetch", "arguments": {"url": fake_web.url("/facts")}}
    assert result["id"] == "call_1" and result["is_error"] is False and "forty-two" in result["content"]
    assistant = _messages(server, headers, session_id)[-1]
    assert assistant["content"] == "The page says forty-two."
    assert assistant["tool_calls"][0]["name"] == "web_fetch"
    assert "forty-two" in assistant["tool_calls"][0]["result"]["content"]
    tool_message = [m for m in fake_openai.requests[-1].json()["messages"] if m["role"] == "tool"]
    assert tool_message and "forty-two" in tool_message[0]["content"]


def test_chat_stream_stops_upstream_when_client_disconnects(session, fake_openai):
    server, headers, session_id = session
    fake_openai.script(Hang(text="partial answer "))
    response = _chat(server, headers, session_id, "Tell me a long story")
    events = sse_events(response)
    assert next(events)[0] == "start"
    name, data = next(event for event in events if event[0] != "comment")
    assert (name, data["content"]) == ("delta", "partial answer ")
    response.close()
    # The upstream reply never ends by itself (Hang): a hang-up there can only be the server passing ours on.
    fake_openai.wait_for_hangups_sync(1, timeout=5.0)
    # The reply's row exists (`streaming`) from the turn's start: wait for its final state, not for the row.
    stored = poll(lambda: [m for m in _messages(server, headers, session_id)
                           if m["role"] == "assistant" and m["status"] != "streaming"],
                  "the interrupted reply was stored")
    assert stored[-1]["status"] == "interrupted"
    assert stored[-1]["content"] == "partial answer "


def test_an_upstream_failure_mid_stream_ends_with_one_error_and_keeps_the_partial_reply(session, fake_openai):
    server, headers, session_id = session
    fake_openai.script(StreamError(text="Half of it ", message="Overloaded."))
    with _chat(server, headers, session_id, "go") as response:
        events = [(name, data) for name, data in sse_events(response) if name != "comment"]
    names = [name for name, _ in events]
    assert names[0] == "start" and names[-1] == "error" and set(names[1:-1]) == {"delta"}
    assert "".join(data["content"] for name, data in events if name == "delta") == "Half of it "
    assert events[-1][1]["code"] == "upstream_error"
    assistant = _messages(server, headers, session_id)[-1]
    assert (assistant["status"], assistant["content"]) == ("error", "Half of it ")


def test_an_upstream_error_never_reveals_the_api_key(session, fake_openai):
    server, headers, session_id = session
    fake_openai.script(Error(status=401, message=f"Incorrect API key provided: {UPSTREAM_KEY}"))
    with _chat(server, headers, session_id, "go") as response:
        body = response.text
    assert "event: error" in body
    assert UPSTREAM_KEY not in body
    assert UPSTREAM_KEY not in server.log()


def test_keep_alive_comments_flow_while_the_agent_is_silent(session, fake_openai):
    server, headers, session_id = session
    fake_openai.script(Text("slow reply", pieces=["slow ", "reply"], delay=1.0))
    with _chat(server, headers, session_id, "take your time") as response:
        events = list(sse_events(response))
    names = [name for name, _ in events]
    assert names.count("comment") >= 2, names
    assert ("comment", "keep-alive") in events
    assert names[-1] == "done"


def test_a_second_chat_in_another_session_is_not_mixed_up(session, fake_openai):
    server, headers, session_id = session
    other = requests.post(f"{server.base_url}/api/sessions", json={}, headers=headers, timeout=10).json()["id"]
    fake_openai.script(Text("one"), Text("two"))
    for sid, message in ((session_id, "to first"), (other, "to second")):
        with _chat(server, headers, sid, message) as response:
            list(sse_events(response))
    assert [m["content"] for m in _messages(server, headers, other)] == ["to second", "two"]
    assert [m["content"] for m in _messages(server, headers, session_id)] == ["to first", "one"]


def test_knowledge_base_context_reaches_the_model_and_its_sources_are_recorded(session, fake_openai):
    server, headers, session_id = session
    document = requests.post(f"{server.base_url}/api/kb/documents", headers=headers, timeout=10, json={
        "filename": "otters.md", "content": "Sea otters hold hands while sleeping so they do not drift apart."})
    assert document.status_code == 201, document.text
    fake_openai.script(Text("They hold hands."))
    with _chat(server, headers, session_id, "Why do sea otters hold hands while sleeping?") as response:
        events = [(name, data) for name, data in sse_events(response) if name != "comment"]
    done = events[-1][1]
    assert events[-1][0] == "done"
    assert done["sources"] and done["sources"][0]["document"] == {"id": document.json()["id"],
                                                                  "filename": "otters.md"}
    assert {"collection", "document", "chunk_index", "score", "text"} <= set(done["sources"][0])
    assert done["sources"][0]["text"] in fake_openai.requests[-1].json()["messages"][0]["content"]
    system = fake_openai.requests[-1].json()["messages"][0]
    assert system["role"] == "system" and "[otters.md]" in system["content"] and "drift apart" in system["content"]
    stored = _messages(server, headers, session_id)[-1]
    assert stored["sources"] == done["sources"]

"""Every stream hands each event to the client as it is produced: nothing between the provider and the socket
holds events back until the reply ends.

The fake upstream sends its deltas GAP seconds apart; the client notes when each event arrives. Buffering
anywhere (in the view, the middleware, the server) would make the deltas arrive bunched, at the end or in
blocks. The margins are wide, so a loaded machine does not fail them: half the upstream's spread.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from typing import Any

import pytest
import requests

from tests.e2e import server_with_fake_upstream, sse_events
from tests.fakes.llm import Raw, Text

pytestmark = pytest.mark.e2e  # every test here uses a live server its module's fixture starts

GAP = 0.15  # seconds between two deltas at the upstream
PIECES = [f"part{number} " for number in range(6)]
SLOW_REPLY = Text("".join(PIECES), pieces=PIECES, delay=GAP)
ASK = {"nodes": [{"id": "start", "name": "start", "type": "input", "config": {}},
                {"id": "ask", "name": "ask", "type": "llm", "config": {"prompt": "Answer: ${input}"}},
                {"id": "out", "name": "out", "type": "output", "config": {"outputFormat": "text"}}],
       "edges": [{"from": "start", "to": "ask"}, {"from": "ask", "to": "out"}]}


@pytest.fixture(scope="module")
def live(fake_openai_server):
    # Keep-alive comments far apart, so none lands among the deltas.
    server, headers = server_with_fake_upstream(fake_openai_server, AGENTSITE_SSE_KEEPALIVE_S="30")
    yield server, headers
    server.stop()


def timed_events(response: requests.Response) -> list[tuple[float, str, Any]]:
    """(arrival time, event, data) of each SSE event, comments left out; data is JSON-decoded unless it is
    `[DONE]`. Read byte by byte, so an event counts as arrived the moment its blank line does."""
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("text/event-stream")
    events, name, data = [], None, []
    for line in response.iter_lines(chunk_size=1, decode_unicode=True):
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
        elif line == "" and data:
            payload = "\n".join(data)
            decoded = payload if payload == "[DONE]" else json.loads(payload)
            events.append((time.monotonic(), name or "message", decoded))
            name, data = None, []
    return events


def assert_deltas_arrived_as_produced(times: list[float]) -> None:
    assert len(times) == len(PIECES)
    spread = times[-1] - times[0]
    produced = GAP * (len(PIECES) - 1)
    assert spread >= produced / 2, (
        f"the {len(PIECES)} deltas, produced over {produced:.2f} s, arrived within {spread:.3f} s: held back")
    gaps = [later - earlier for earlier, later in zip(times, times[1:], strict=False)]
    assert statistics.median(gaps) >= GAP / 2, f"the deltas arrived bunched: gaps {[round(g, 3) for g in gaps]}"


def test_the_chat_stream_sends_each_delta_as_the_upstream_produces_it(live, fake_openai):
    server, headers = live
    session = requests.post(f"{server.base_url}/api/sessions", json={"name": "flush"}, headers=headers,
                            timeout=10).json()
    fake_openai.script(SLOW_REPLY)
    with requests.post(f"{server.base_url}/api/sessions/{session['id']}/chat", json={"message": "Count"},
                       headers=headers, stream=True, timeout=30) as response:
        events = timed_events(response)
    assert [name for _, name, _ in events] == ["start", *["delta"] * len(PIECES), "done"]
    assert [data["content"] for _, name, data in events if name == "delta"] == PIECES
    assert events[-1][2]["content"] == "".join(PIECES)
    assert_deltas_arrived_as_produced([moment for moment, name, _ in events if name == "delta"])


def test_a_streamed_workflow_run_sends_each_delta_as_the_upstream_produces_it(live, fake_openai):
    server, headers = live
    created = requests.post(f"{server.base_url}/api/workflows", json={"name": "flush-ask", **ASK}, headers=headers,
                            timeout=10)
    assert created.status_code == 201, created.text
    fake_openai.script(SLOW_REPLY)
    with requests.post(f"{server.base_url}/api/workflows/{created.json()['id']}/run", headers=headers, stream=True,
                       timeout=30, json={"input": "the question", "stream": True}) as response:
        events = timed_events(response)
    assert [name for _, name, _ in events] == [
        "run_started", "node_started", "node_finished", "node_started", *["delta"] * len(PIECES), "node_finished",
        "node_started", "node_finished", "done"]
    assert [data["content"] for _, name, data in events if name == "delta"] == PIECES
    assert events[-1][2]["run"]["status"] == "success"
    assert_deltas_arrived_as_produced([moment for moment, name, _ in events if name == "delta"])


def _kind(data: Any) -> str:
    if data == "[DONE]":
        return "[DONE]"
    choice = data["choices"][0]
    if choice["finish_reason"]:
        return f"finish:{choice['finish_reason']}"
    return "content" if choice["delta"].get("content") else "role"


@pytest.mark.parametrize("model", ["fake-model", "agent"])
def test_a_v1_stream_sends_each_chunk_as_the_upstream_produces_it(live, fake_openai, model):
    server, headers = live
    fake_openai.script(SLOW_REPLY)
    with requests.post(f"{server.base_url}/v1/chat/completions", headers=headers, stream=True, timeout=30,
                       json={"model": model, "stream": True, "messages": [{"role": "user", "content": "Count"}]},
                       ) as response:
        events = timed_events(response)
    assert [_kind(data) for _, _, data in events] == ["role", *["content"] * len(PIECES), "finish:stop", "[DONE]"]
    contents = [(moment, data["choices"][0]["delta"]["content"]) for moment, _, data in events
                if _kind(data) == "content"]
    assert [text for _, text in contents] == PIECES
    assert_deltas_arrived_as_produced([moment for moment, _ in contents])


ROLE = 'data: {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}\n\n'
HELD = ('data: {"choices": [{"index": 0, "delta": {"content": "held words"}}]}\n\n'
        'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n')
# Each door: its path, body and the name (or chat chunk kind) of its opening event.
DOORS = {
    "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Think"}]}, "role"),
    "responses": ("/v1/responses", {"input": "Think", "store": False}, "response.created"),
    "messages": ("/v1/messages", {"max_tokens": 50, "messages": [{"role": "user", "content": "Think"}]},
                 "message_start"),
}


BROKEN = 'data: {"error": {"message": "Overloaded while thinking.", "type": "server_error"}}\n\n'
# How each door ends a stream whose upstream failed after answering (no other target to try): its last event.
FAILED = {"chat": "message", "responses": "response.failed", "messages": "error"}


def _name(event: str, data: Any) -> str:
    """An event's name; a chat chunk (unnamed) by its kind."""
    return _kind(data) if event == "message" else event


@pytest.mark.parametrize("then", ["answers", "fails"])
@pytest.mark.parametrize("door", sorted(DOORS))
def test_a_v1_door_answers_while_the_model_thinks(live, fake_openai, door, then):
    """The upstream answers (200, its role chunk) and holds its first token until the test has read the door's
    opening event: the reply starts when the upstream answers, not when its first token comes (a model that
    thinks for seconds; a paced stream's first token then costs only its own bytes). Without that, the
    client would wait for the status line until the fake gives up holding (30 s) and the read timeout fails
    this test. An upstream that fails after answering ends the started stream with the door's error event."""
    server, headers = live
    path, body, opening = DOORS[door]
    step = threading.Semaphore(0)
    fake_openai.script(Raw("", pieces=[ROLE, HELD if then == "answers" else BROKEN], step=step))
    with requests.post(f"{server.base_url}{path}", headers=headers, stream=True, timeout=(5, 5),
                       json={"model": "fake-model", "stream": True, **body}) as response:
        assert response.status_code == 200, response.text
        events = sse_events(response)  # read byte by byte: what the client has now
        assert _name(*next(events)) == opening
        step.release()  # now the first token
        rest = list(events)
    text = json.dumps([data for _, data in rest])
    if then == "answers":
        assert "held words" in text
    else:
        assert rest[-1][0] == FAILED[door] and "Overloaded while thinking." in json.dumps(rest[-1][1])
        assert "held words" not in text


def test_a_stream_started_while_the_model_thinks_names_the_entry_that_answered(live, fake_openai):
    """Through an alias, the reply starts before any token: its X-Agentsite-Upstream header and its chunks'
    `model` already name the catalogue entry whose success status started it (not the alias)."""
    server, headers = live
    made = requests.post(f"{server.base_url}/api/aliases", headers=headers, timeout=10, json={
        "name": "thinker", "strategy": "fallback", "targets": [{"model": "default/fake-model"}]})
    assert made.status_code == 201, made.text
    step = threading.Semaphore(0)
    fake_openai.script(Raw("", pieces=[ROLE, HELD], step=step))
    with requests.post(f"{server.base_url}/v1/chat/completions", headers=headers, stream=True, timeout=(5, 5),
                       json={"model": "thinker", "stream": True, "messages": [{"role": "user", "content": "Think"}]}
                       ) as response:
        assert response.status_code == 200, response.text
        assert response.headers["X-Agentsite-Upstream"] == "default/fake-model"
        events = sse_events(response)
        event, data = next(events)
        assert _name(event, data) == "role" and data["model"] == "default/fake-model"
        step.release()
        rest = [data for _, data in events if data != "[DONE]"]
    assert {chunk["model"] for chunk in rest} == {"default/fake-model"}
    assert "held words" in "".join(chunk["choices"][0]["delta"].get("content", "") for chunk in rest
                                   if chunk["choices"])

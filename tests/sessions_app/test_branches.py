"""Branches in the data: edit and regenerate make siblings, `current` selects the path the upstream receives,
and stop stores what streamed as `stopped` (a live server, a fake upstream on loopback)."""

import threading

import pytest
import requests

from tests.e2e import server_with_fake_upstream, sse_events
from tests.fakes.llm import Hang, Text

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def chat_server(fake_openai_server):
    server, headers = server_with_fake_upstream(fake_openai_server)
    yield server, headers
    server.stop()


@pytest.fixture
def session(chat_server, fake_openai):
    server, headers = chat_server
    created = requests.post(f"{server.base_url}/api/sessions", json={"name": "tree"}, headers=headers, timeout=10)
    return server, headers, created.json()["id"]


def _stream(server, headers, path, body):
    with requests.post(f"{server.base_url}{path}", json=body, headers=headers, stream=True, timeout=30) as response:
        assert response.status_code == 200, response.text
        return {name: data for name, data in sse_events(response) if name != "comment"}


def _chat(server, headers, session_id, message, **body):
    return _stream(server, headers, f"/api/sessions/{session_id}/chat", {"message": message, **body})


def _tree(server, headers, session_id):
    return requests.get(f"{server.base_url}/api/sessions/{session_id}/messages", headers=headers, timeout=10).json()


def _sent(fake_openai):
    return [(message["role"], message["content"]) for message in fake_openai.requests[-1].json()["messages"]
            if message["role"] != "system"]


def test_regenerate_and_edit_make_siblings_and_the_upstream_gets_the_selected_path_only(session, fake_openai):
    server, headers, session_id = session
    fake_openai.script(Text("Paris."), Text("Lyon is second."), Text("It is Paris, of course."),
                       Text("Berlin."), Text("After the edit."))
    first = _chat(server, headers, session_id, "Capital of France?")
    second = _chat(server, headers, session_id, "And the second city?")
    again = _stream(server, headers, f"/api/sessions/{session_id}/messages/{first['done']['message_id']}/regenerate",
                    {})
    assert again["start"]["user_message_id"] is None
    assert again["start"]["parent"] == first["start"]["user_message_id"]
    assert _sent(fake_openai) == [("user", "Capital of France?")]  # the same question, no later turn
    tree = _tree(server, headers, session_id)
    assert tree["current"] == again["done"]["message_id"]
    by_id = {message["id"]: message for message in tree["results"]}
    question = by_id[first["start"]["user_message_id"]]
    assert question["children"] == [first["done"]["message_id"], again["done"]["message_id"]]
    # Edit the first question: a sibling of it (parent null), whose reply becomes current.
    edited = _chat(server, headers, session_id, "Capital of Germany?", parent=None)
    assert _sent(fake_openai) == [("user", "Capital of Germany?")]
    assert _tree(server, headers, session_id)["current"] == edited["done"]["message_id"]
    # Back to the first branch: its newest leaf (the second question's reply) becomes current, and the next
    # turn sends that path and nothing of the other branches.
    selected = requests.patch(f"{server.base_url}/api/sessions/{session_id}", headers=headers, timeout=10,
                              json={"current": first["done"]["message_id"]})
    assert selected.status_code == 200 and selected.json()["current"] == second["done"]["message_id"]
    _chat(server, headers, session_id, "Thanks")
    assert _sent(fake_openai) == [("user", "Capital of France?"), ("assistant", "Paris."),
                                  ("user", "And the second city?"), ("assistant", "Lyon is second."),
                                  ("user", "Thanks")]


def test_a_parent_that_is_not_a_reply_of_the_session_is_refused_and_nothing_is_stored(session, fake_openai):
    server, headers, session_id = session
    fake_openai.script(Text("One."))
    first = _chat(server, headers, session_id, "One?")
    url = f"{server.base_url}/api/sessions/{session_id}/chat"
    for parent in (first["start"]["user_message_id"], "00000000-0000-0000-0000-000000000000", "nope"):
        refused = requests.post(url, json={"message": "x", "parent": parent}, headers=headers, timeout=10)
        assert refused.status_code == 400 and "parent" in refused.json()["error"]["details"], refused.text
    assert _tree(server, headers, session_id)["count"] == 2


def test_stop_stores_the_text_so_far_as_stopped_and_the_stream_ends_with_done(session, fake_openai):
    server, headers, session_id = session
    fake_openai.script(Hang("The beginning of a long"))
    events = []
    started = threading.Event()

    def chat():
        with requests.post(f"{server.base_url}/api/sessions/{session_id}/chat", json={"message": "Go on"},
                           headers=headers, stream=True, timeout=30) as response:
            for name, data in sse_events(response):
                events.append((name, data))
                if name == "delta":
                    started.set()

    reader = threading.Thread(target=chat)
    reader.start()
    assert started.wait(10)
    reply = next(data["message_id"] for name, data in events if name == "start")
    stopped = requests.post(f"{server.base_url}/api/sessions/{session_id}/messages/{reply}/stop", headers=headers,
                            timeout=10)
    reader.join(10)
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["status"] == "stopped" and stopped.json()["content"] == "The beginning of a long"
    assert events[-1][0] == "done" and events[-1][1]["status"] == "stopped"
    stored = _tree(server, headers, session_id)["results"][-1]
    assert (stored["status"], stored["content"]) == ("stopped", "The beginning of a long")

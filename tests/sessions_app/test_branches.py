"""Branches in the data: edit and regenerate make siblings, `current` selects the path the upstream receives,
and stop stores what streamed as `stopped` (a live server, a fake upstream on loopback)."""

import threading

import pytest
import requests

from tests.e2e import server_with_fake_upstream, sse_events
from tests.fakes.http import FakeResponse
from tests.fakes.llm import Call, Hang, Text, ToolCalls

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


def _count(server, headers, session_id):
    return _tree(server, headers, session_id)["count"]


def _other_session(server, headers, fake_openai):
    other = requests.post(f"{server.base_url}/api/sessions", json={"name": "other"}, headers=headers,
                          timeout=10).json()["id"]
    fake_openai.script(Text("Elsewhere."))
    return other, _chat(server, headers, other, "Elsewhere?")


def test_regenerate_refuses_what_is_not_a_reply_of_the_session_and_stores_nothing(session, fake_openai):
    server, headers, session_id = session
    fake_openai.script(Text("Here."))
    here = _chat(server, headers, session_id, "Here?")
    other, there = _other_session(server, headers, fake_openai)
    url = f"{server.base_url}/api/sessions/{session_id}/messages/{{}}/regenerate"
    for mid in (here["start"]["user_message_id"], there["done"]["message_id"], "00000000-0000-0000-0000-000000000000"):
        refused = requests.post(url.format(mid), json={}, headers=headers, timeout=10)
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found", refused.text
    assert requests.post(url.format("nope"), json={}, headers=headers, timeout=10).status_code == 404
    assert (_count(server, headers, session_id), _count(server, headers, other)) == (2, 2)
    assert len(fake_openai.requests) == 2  # the upstream was never asked


def test_a_parent_from_another_session_is_refused_naming_parent(session, fake_openai):
    server, headers, session_id = session
    fake_openai.script(Text("Here."))
    here = _chat(server, headers, session_id, "Here?")
    other, there = _other_session(server, headers, fake_openai)
    refused = requests.post(f"{server.base_url}/api/sessions/{session_id}/chat", headers=headers, timeout=10,
                            json={"message": "x", "parent": there["done"]["message_id"]})
    assert refused.status_code == 400 and refused.json()["error"]["details"].keys() == {"parent"}, refused.text
    assert (_count(server, headers, session_id), _count(server, headers, other)) == (2, 2)
    assert _tree(server, headers, session_id)["current"] == here["done"]["message_id"]


def test_patch_current_with_a_foreign_id_changes_nothing_even_beside_a_valid_name(session, fake_openai):
    server, headers, session_id = session
    fake_openai.script(Text("Here."))
    here = _chat(server, headers, session_id, "Here?")
    _, there = _other_session(server, headers, fake_openai)
    url = f"{server.base_url}/api/sessions/{session_id}"
    for body in ({"current": there["done"]["message_id"]}, {"current": there["done"]["message_id"], "name": "renamed"},
                 {"current": "nope", "name": "renamed"}, {"current": None}):
        refused = requests.patch(url, json=body, headers=headers, timeout=10)
        assert refused.status_code == 400 and "current" in refused.json()["error"]["details"], refused.text
        assert set(refused.json()["error"]["details"]) <= {"current"}
    after = requests.get(url, headers=headers, timeout=10).json()
    assert (after["name"], after["current"]) == ("tree", here["done"]["message_id"])
    # The question is a message of the session: selecting it selects its reply, the end of that branch.
    chosen = requests.patch(url, json={"current": here["start"]["user_message_id"], "name": "renamed"},
                            headers=headers, timeout=10)
    assert chosen.status_code == 200 and (chosen.json()["name"], chosen.json()["current"]) == (
        "renamed", here["done"]["message_id"])


def test_stop_of_a_finished_reply_answers_it_unchanged_and_of_a_question_404(session, fake_openai):
    server, headers, session_id = session
    fake_openai.script(Text("Finished long ago."))
    here = _chat(server, headers, session_id, "Done?")
    url = f"{server.base_url}/api/sessions/{session_id}/messages/{{}}/stop"
    before = _tree(server, headers, session_id)["results"][-1]
    answered = requests.post(url.format(here["done"]["message_id"]), headers=headers, timeout=10)
    assert answered.status_code == 200 and answered.json() == before
    for mid in (here["start"]["user_message_id"], "00000000-0000-0000-0000-000000000000"):
        refused = requests.post(url.format(mid), headers=headers, timeout=10)
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found", refused.text
    assert _tree(server, headers, session_id)["results"][-1] == before


def test_another_users_session_is_not_found_on_every_tree_route(session, fake_openai):
    server, headers, session_id = session
    fake_openai.script(Text("Mine."))
    mine = _chat(server, headers, session_id, "Mine?")
    registered = requests.post(f"{server.base_url}/api/auth/register", timeout=10,
                               json={"username": "tree-outsider", "password": "correct-horse-battery-9"})
    assert registered.status_code == 201, registered.text
    outsider = {"Authorization": f"Bearer {registered.json()['token']}"}
    base, reply = f"{server.base_url}/api/sessions/{session_id}", mine["done"]["message_id"]
    attempts = [("get", f"{base}/messages", None), ("post", f"{base}/messages/{reply}/regenerate", {}),
                ("post", f"{base}/messages/{reply}/stop", None), ("patch", base, {"current": reply}),
                ("patch", base, {"pinned": True}), ("post", f"{base}/chat", {"message": "x", "parent": reply})]
    for method, url, body in attempts:
        refused = requests.request(method, url, json=body, headers=outsider, timeout=10)
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found", (url, refused.text)
    tree = _tree(server, headers, session_id)
    assert tree["count"] == 2 and tree["current"] == reply and len(fake_openai.requests) == 1
    assert requests.get(base, headers=headers, timeout=10).json()["pinned"] is False


DOCUMENTS = {"zephyr-speed.txt": "The zephyr turbine spins at nine hundred revolutions a minute in the north hall.",
             "zephyr-care.txt": "Zephyr turbine care: the night crew changes the turbine oil every spring and logs "
                                "each change in the blue binder kept beside the zephyr control desk.",
             "cafeteria.txt": "Lunch menu: lentil soup on Fridays, pancakes on Sundays."}


def test_sources_name_exactly_the_passages_the_upstream_received(session, fake_openai):
    server, headers, session_id = session
    for filename, content in DOCUMENTS.items():
        made = requests.post(f"{server.base_url}/api/kb/documents", json={"filename": filename, "content": content},
                             headers=headers, timeout=30)
        assert made.status_code == 201, made.text
    config = f"{server.base_url}/api/config"
    # A budget that cuts the second passage: its source is the passage as cut.
    assert requests.patch(config, json={"kb_max_chars": 150}, headers=headers, timeout=10).status_code == 200
    try:
        fake_openai.script(Text("Nine hundred."))
        done = _chat(server, headers, session_id, "How fast does the zephyr turbine spin?")["done"]
    finally:
        requests.patch(config, json={"kb_max_chars": 4000}, headers=headers, timeout=10)
    sources = done["sources"]
    system = next(message["content"] for message in fake_openai.requests[-1].json()["messages"]
                  if message["role"] == "system")
    named = [source["document"]["filename"] for source in sources]
    assert named[0] == "zephyr-speed.txt" and "zephyr-care.txt" in named, sources
    assert "\n\n".join(f"[{source['document']['filename']}] {source['text']}" for source in sources) in system
    for filename in DOCUMENTS:  # a document is in the context exactly when a source names it
        assert (f"[{filename}] " in system) == (filename in named)
    care = next(source for source in sources if source["document"]["filename"] == "zephyr-care.txt")
    assert DOCUMENTS["zephyr-care.txt"].startswith(care["text"]) and care["text"] != DOCUMENTS["zephyr-care.txt"]
    assert all(source["collection"]["name"] and source["document"]["id"] for source in sources)
    assert _tree(server, headers, session_id)["results"][-1]["sources"] == sources


def test_steps_record_each_tool_call_its_arguments_result_and_duration(session, fake_openai, fake_web):
    server, headers, session_id = session
    fake_web.route("/slow", FakeResponse.text("<html><body><p>The slow page says forty-two.</p></body></html>",
                                              content_type="text/html", delay=0.4))
    url = fake_web.url("/slow")
    fake_openai.script(ToolCalls([Call("web_fetch", {"url": url}, id="c1"), Call("no_such_tool", {"q": 1}, id="c2")]),
                       Text("Forty-two."))
    done = _chat(server, headers, session_id, "What does the slow page say?")["done"]
    steps = done["steps"]
    assert [(step["type"], step["id"], step["name"], step["arguments"], step["is_error"]) for step in steps] == [
        ("tool_call", "c1", "web_fetch", {"url": url}, False), ("tool_call", "c2", "no_such_tool", {"q": 1}, True)]
    assert "forty-two" in steps[0]["result"] and "no_such_tool" in steps[1]["result"]
    assert 400 <= steps[0]["duration_ms"] < 10_000 and 0 <= steps[1]["duration_ms"] < 400
    assert _tree(server, headers, session_id)["results"][-1]["steps"] == steps

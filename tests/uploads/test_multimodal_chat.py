"""Attachments reach the model in its own wire format: chat turns and /v1 against a real daphne server, checked
on the bytes the fake upstream LLMs (OpenAI and Anthropic formats) received."""

from __future__ import annotations

import base64
import json

import pytest
import requests

from tests.e2e import UPSTREAM_KEY, server_with_fake_upstream, sse_events
from tests.fakes.llm import Text
from tests.uploads.conftest import image_bytes, minimal_pdf

pytestmark = pytest.mark.e2e

PNG = image_bytes("PNG", (3, 2), (10, 200, 90))
NOTES = "# Notes\nÉté: bring the tent.".encode()
PAGE = (b"<!DOCTYPE html><html><head><title>Hidden title</title><script>alert('no')</script></head>"
        b"<body><h1>Lighthouse</h1><p>The keeper climbs at dusk.</p></body></html>")
REPORT = minimal_pdf("Quarterly report")
QUESTION = "What are these?"

NOTES_TEXT = "\n\n[Attached file: notes.md]\n# Notes\nÉté: bring the tent.\n[End of notes.md]"
PAGE_TEXT = "\n\n[Attached file: page.html]\nLighthouse\nThe keeper climbs at dusk.\n[End of page.html]"
REPORT_TEXT = "\n\n[Attached file: report.pdf]\nQuarterly report\n[End of report.pdf]"


@pytest.fixture(scope="module")
def chat_server(fake_openai_server):
    server, headers = server_with_fake_upstream(fake_openai_server)
    registered = requests.post(f"{server.base_url}/api/auth/register", timeout=10,
                               json={"username": "someone-else", "password": "correct-horse-battery-9"})
    assert registered.status_code == 201, registered.text
    yield server, headers, {"Authorization": f"Bearer {registered.json()['token']}"}
    server.stop()


def _use(server, headers, provider: str, fake) -> None:
    response = requests.patch(f"{server.base_url}/api/config", headers=headers, timeout=10, json={
        "provider": provider, "base_url": fake.base_url, "api_key": UPSTREAM_KEY, "model": "fake-model"})
    assert response.status_code == 200, response.text


@pytest.fixture
def on_openai(chat_server, fake_openai):
    server, headers, other = chat_server
    _use(server, headers, "openai", fake_openai)
    return server, headers, other


@pytest.fixture
def on_anthropic(chat_server, fake_anthropic):
    server, headers, other = chat_server
    _use(server, headers, "anthropic", fake_anthropic)
    return server, headers, other


def _upload(server, headers, name: str, data: bytes) -> str:
    response = requests.post(f"{server.base_url}/api/upload", files={"file": (name, data)}, headers=headers,
                             timeout=10)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def _session(server, headers) -> str:
    # Named: its first exchange asks the model for no title, so the turn's request is the upstream's only one.
    return requests.post(f"{server.base_url}/api/sessions", json={"name": "attachments"}, headers=headers,
                         timeout=10).json()["id"]


def _chat(server, headers, session_id: str, message: str, attachments: list[str]) -> requests.Response:
    return requests.post(f"{server.base_url}/api/sessions/{session_id}/chat", headers=headers, stream=True,
                         timeout=30, json={"message": message, "attachments": attachments})


def _chat_events(server, headers, message: str, attachments: list[str]) -> tuple[str, list[str]]:
    session_id = _session(server, headers)
    with _chat(server, headers, session_id, message, attachments) as response:
        assert response.status_code == 200, response.text
        names = [name for name, _ in sse_events(response) if name != "comment"]
    return session_id, names


def _four_uploads(server, headers) -> list[str]:
    return [_upload(server, headers, name, data) for name, data in
            (("photo.png", PNG), ("notes.md", NOTES), ("page.html", PAGE), ("report.pdf", REPORT))]


def _last_user_content(fake):
    [request] = fake.requests
    return request, [message for message in request.json()["messages"] if message["role"] == "user"][-1]["content"]


def test_attachments_reach_openai_as_an_image_url_data_url_and_as_text_parts_with_their_filenames(on_openai,
                                                                                                  fake_openai):
    server, headers, _ = on_openai
    fake_openai.script(Text("A photo, notes, a page and a report."))

    session_id, names = _chat_events(server, headers, QUESTION, _four_uploads(server, headers))

    assert names[0] == "start" and names[-1] == "done"
    request, content = _last_user_content(fake_openai)
    data_url = f"data:image/png;base64,{base64.b64encode(PNG).decode()}"
    assert content == [{"type": "text", "text": QUESTION},
                       {"type": "image_url", "image_url": {"url": data_url}},
                       {"type": "text", "text": NOTES_TEXT},
                       {"type": "text", "text": PAGE_TEXT},
                       {"type": "text", "text": REPORT_TEXT}]
    assert json.dumps(data_url).encode() in request.body  # the bytes on the wire, not only their parse
    assert base64.b64decode(data_url.split(",", 1)[1]) == PNG


def test_attachments_reach_anthropic_as_a_base64_image_source_and_as_text_blocks(on_anthropic, fake_anthropic):
    server, headers, _ = on_anthropic
    fake_anthropic.script(Text("A photo, notes, a page and a report."))

    _, names = _chat_events(server, headers, QUESTION, _four_uploads(server, headers))

    assert names[0] == "start" and names[-1] == "done"
    request, content = _last_user_content(fake_anthropic)
    encoded = base64.b64encode(PNG).decode()
    assert content == [{"type": "text", "text": QUESTION},
                       {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": encoded}},
                       {"type": "text", "text": NOTES_TEXT},
                       {"type": "text", "text": PAGE_TEXT},
                       {"type": "text", "text": REPORT_TEXT}]
    assert json.dumps(encoded).encode() in request.body
    assert request.path == "/v1/messages"


def test_a_text_only_turn_goes_to_openai_as_one_string_and_the_message_keeps_its_attachment_ids(on_openai,
                                                                                                fake_openai):
    server, headers, _ = on_openai
    fake_openai.script(Text("Bring the tent."))
    notes = _upload(server, headers, "notes.md", NOTES)

    session_id, _ = _chat_events(server, headers, "Summarise.", [notes])

    _, content = _last_user_content(fake_openai)
    assert content == "Summarise." + NOTES_TEXT
    stored = requests.get(f"{server.base_url}/api/sessions/{session_id}/messages", headers=headers,
                          timeout=10).json()["results"]
    assert [(message["role"], message["attachments"]) for message in stored] == [("user", [notes]),
                                                                                 ("assistant", [])]


def test_another_users_upload_in_a_chat_is_404_before_the_stream_and_nothing_is_stored_or_sent(on_openai,
                                                                                               fake_openai):
    server, headers, other = on_openai
    theirs = _upload(server, other, "theirs.png", PNG)
    mine = _upload(server, headers, "mine.md", NOTES)
    deleted = _upload(server, headers, "deleted.md", NOTES)
    assert requests.delete(f"{server.base_url}/api/uploads/{deleted}", headers=headers, timeout=10).status_code == 204
    session_id = _session(server, headers)

    for attachments in ([theirs], [mine, theirs], [deleted], ["not-an-upload-id"]):
        with _chat(server, headers, session_id, "Look at this", attachments) as response:
            assert response.status_code == 404, response.text
            assert response.headers["Content-Type"] == "application/json"
            error = response.json()["error"]
        assert error["code"] == "not_found"
        assert error["details"]["attachments"] == [f"No such upload: {attachments[-1]}"]

    assert requests.get(f"{server.base_url}/api/sessions/{session_id}/messages", headers=headers,
                        timeout=10).json()["count"] == 0
    assert fake_openai.requests == []
    assert requests.get(f"{server.base_url}/api/uploads/{theirs}", headers=other, timeout=10).content == PNG


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_an_image_part_on_v1_reaches_each_provider_in_its_own_format(chat_server, fake_openai, fake_anthropic,
                                                                     provider):
    server, headers, _ = chat_server
    fake = fake_openai if provider == "openai" else fake_anthropic
    _use(server, headers, provider, fake)
    fake.script(Text("A small green image."))
    encoded = base64.b64encode(PNG).decode()

    response = requests.post(f"{server.base_url}/v1/chat/completions", timeout=30, json={
        "model": "fake-model", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What colour?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{encoded}"}}]}]})

    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "A small green image."
    _, content = _last_user_content(fake)
    image = ({"type": "image_url", "image_url": {"url": f"data:image/png;base64,{encoded}"}} if provider == "openai"
             else {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": encoded}})
    assert content == [{"type": "text", "text": "What colour?"}, image]


def test_a_follow_up_turn_still_shows_the_earlier_image_and_a_deleted_one_becomes_a_note(on_anthropic,
                                                                                         fake_anthropic):
    server, headers, _ = on_anthropic
    photo, notes = _upload(server, headers, "photo.png", PNG), _upload(server, headers, "notes.md", NOTES)
    session_id = _session(server, headers)
    for message, attachments in (("Look.", [photo]), ("And these notes.", [notes])):
        fake_anthropic.script(Text("Seen."))
        with _chat(server, headers, session_id, message, attachments) as response:
            assert response.status_code == 200, response.text
            list(sse_events(response))
    assert requests.delete(f"{server.base_url}/api/uploads/{notes}", headers=headers, timeout=10).status_code == 204
    fake_anthropic.reset()
    fake_anthropic.script(Text("Green."))

    with _chat(server, headers, session_id, "What colour was the photo?", []) as response:
        assert response.status_code == 200, response.text  # a deleted earlier upload is no 404
        list(sse_events(response))

    [request] = fake_anthropic.requests
    users = [message["content"] for message in request.json()["messages"] if message["role"] == "user"]
    encoded = base64.b64encode(PNG).decode()
    assert users[0] == [{"type": "text", "text": "Look."}, {"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": encoded}}]
    assert users[1] == [{"type": "text", "text": "And these notes."},
                        {"type": "text", "text": "\n\n[An attachment of this message was deleted since.]"}]
    assert users[2] in ("What colour was the photo?", [{"type": "text", "text": "What colour was the photo?"}])

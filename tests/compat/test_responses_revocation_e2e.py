"""A /v1/responses stream whose API key is revoked mid-stream ends, on a real server, with the Responses API's own
terminal event: `response.failed` carrying `token_invalid`, its sequence number the next one (not the chat
completions error chunk the other /v1 streams end with), and the upstream request is closed."""

from __future__ import annotations

import json

import pytest
import requests

from tests.e2e import server_with_fake_upstream, sse_events
from tests.fakes.llm import Text

pytestmark = pytest.mark.e2e

WORDS = [f"word{index} " for index in range(400)]


@pytest.fixture(scope="module")
def served(fake_openai_server):
    server, admin = server_with_fake_upstream(fake_openai_server)
    yield server, admin
    server.stop()


def test_a_revoked_key_ends_a_responses_stream_with_response_failed(served, fake_openai):
    server, admin = served
    made = requests.post(f"{server.base_url}/api/keys", headers=admin, timeout=10,
                         json={"name": "responses", "scopes": ["v1"]})
    assert made.status_code == 201, made.text
    key = {"Authorization": f"Bearer {made.json()['key']}"}
    fake_openai.script(Text("".join(WORDS), pieces=WORDS, delay=0.05))  # 20 s, if nothing stops it
    events: list[tuple[str, dict]] = []
    with requests.post(f"{server.base_url}/v1/responses", headers=key, timeout=30, stream=True,
                       json={"model": "fake-model", "input": "count", "stream": True}) as response:
        assert response.status_code == 200, response.text
        stream = sse_events(response)
        for name, data in stream:
            events.append((name, data))
            if name == "response.output_text.delta":
                break
        revoked = requests.delete(f"{server.base_url}/api/keys/{made.json()['id']}", headers=admin, timeout=10)
        assert revoked.status_code == 204, revoked.text
        events += [(name, data) for name, data in stream if name != "comment"]
    name, last = events[-1]
    assert name == "response.failed", events[-3:]
    assert last["response"]["status"] == "failed" and last["response"]["error"]["code"] == "token_invalid", last
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    text = "".join(data["delta"] for name, data in events if name == "response.output_text.delta")
    assert len(text) < len("".join(WORDS)), "the whole reply was sent after the key was revoked"
    assert not any("error" in data and "response" not in data for _, data in events), json.dumps(events[-2:])
    fake_openai.wait_for_hangups_sync(1, timeout=10)

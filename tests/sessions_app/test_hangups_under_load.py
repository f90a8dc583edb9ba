"""Hang-ups honoured under load: 50 concurrent chat streams whose clients leave after 10 deltas each.

Before the keep-alive wait was made cancel-safe, 50 of 50 such replies ran to the end and were stored
`complete` while the upstream saw no hang-up (Python 3.11's asyncio.wait_for swallowed the cancellation).
"""

import pytest
import requests

from tests.e2e import in_parallel, poll, read_then_hang_up, server_with_fake_upstream
from tests.fakes.llm import Text

pytestmark = pytest.mark.e2e  # every test here uses a live server its module's fixture starts

CLIENTS = 50
SLOW_REPLY = Text("word " * 200, pieces=["word "] * 200, delay=0.05)  # ten seconds if nobody hangs up


@pytest.fixture(scope="module")
def chat_server(fake_openai_server):
    server, headers = server_with_fake_upstream(fake_openai_server)
    yield server, headers
    server.stop()


def test_fifty_concurrent_chats_whose_clients_hang_up_are_all_stored_interrupted(chat_server, fake_openai):
    server, headers = chat_server
    sessions = in_parallel(CLIENTS, lambda _: requests.post(f"{server.base_url}/api/sessions", json={},
                                                            headers=headers, timeout=30).json()["id"])
    fake_openai.script(*[SLOW_REPLY] * CLIENTS)

    def chat_and_leave(index: int) -> int:
        response = requests.post(f"{server.base_url}/api/sessions/{sessions[index]}/chat",
                                 json={"message": f"story {index}"}, headers=headers, stream=True, timeout=60)
        assert response.status_code == 200, response.text
        return read_then_hang_up(response, deltas=10, is_delta=lambda name, _: name == "delta")

    assert in_parallel(CLIENTS, chat_and_leave) == [10] * CLIENTS

    fake_openai.wait_for_hangups_sync(CLIENTS, timeout=15)

    def replies() -> list[dict]:
        found = []
        for session_id in sessions:
            messages = requests.get(f"{server.base_url}/api/sessions/{session_id}/messages", headers=headers,
                                    timeout=30).json()["results"]
            found += [message for message in messages if message["role"] == "assistant"]
        # Stored once each turn has finished its clean-up, which comes after the upstream saw the hang-up.
        settled = len(found) == CLIENTS and all(reply["status"] != "streaming" for reply in found)
        return found if settled else []

    stored = poll(replies, f"all {CLIENTS} replies were stored with their final status", timeout=15)
    assert sorted({reply["status"] for reply in stored}) == ["interrupted"]
    assert all(reply["content"].startswith("word word ") for reply in stored)
    assert all(len(reply["content"]) < len(SLOW_REPLY.text) for reply in stored)

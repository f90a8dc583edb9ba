"""Hang-ups honoured under load on /v1: 50 concurrent streams whose clients leave after 10 deltas each.

Each hang-up must close the upstream request (the fake counts them), for the provider's model (a
pass-through) and for the `agent` model (the agent loop).
"""

import pytest
import requests

from tests.e2e import in_parallel, read_then_hang_up, server_with_fake_upstream
from tests.fakes.llm import Text

pytestmark = pytest.mark.e2e  # every test here uses a live server its module's fixture starts

CLIENTS = 50
SLOW_REPLY = Text("word " * 200, pieces=["word "] * 200, delay=0.05)


@pytest.fixture(scope="module")
def v1_server(fake_openai_server):
    server, headers = server_with_fake_upstream(fake_openai_server)
    yield server, headers
    server.stop()


def _is_text_chunk(name: str, data) -> bool:
    return isinstance(data, dict) and bool(data.get("choices") and data["choices"][0]["delta"].get("content"))


@pytest.mark.parametrize("model", ["fake-model", "agent"])
def test_fifty_concurrent_v1_streams_whose_clients_hang_up_each_close_the_upstream(v1_server, fake_openai, model):
    server, headers = v1_server
    fake_openai.script(*[SLOW_REPLY] * CLIENTS)

    def stream_and_leave(index: int) -> int:
        response = requests.post(f"{server.base_url}/v1/chat/completions", headers=headers, stream=True, timeout=60,
                                 json={"model": model, "stream": True,
                                       "messages": [{"role": "user", "content": f"story {index}"}]})
        assert response.status_code == 200, response.text
        return read_then_hang_up(response, deltas=10, is_delta=_is_text_chunk)

    assert in_parallel(CLIENTS, stream_and_leave) == [10] * CLIENTS

    fake_openai.wait_for_hangups_sync(CLIENTS, timeout=15)
    assert fake_openai.hangups == CLIENTS
    assert len(fake_openai.requests) == CLIENTS

"""`ask_<slug>` behind `serve --workers 2`: the tool keeps nothing between requests, so a Streamable HTTP session's
calls answer whichever worker takes them, and an edit of the agent made through one worker counts from the next
call on both (each answer names its worker: AGENTSITE_WORKER_HEADER; the fake upstream's recorded system
messages are the witness)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import requests

from tests.e2e import UPSTREAM_KEY, every_worker_answers
from tests.fakes.llm import Echo, FakeOpenAI
from tests.mcpbridge.conftest import LIVE_ENV
from tests.mcpbridge.test_workers import Answers, mcp_session
from tests.server import LiveServer

pytestmark = pytest.mark.e2e

SESSIONS = 6
CALLS = 3


@pytest.fixture(scope="module")
def two_workers() -> Iterator[tuple[LiveServer, dict[str, str], str, FakeOpenAI, int]]:
    upstream = FakeOpenAI(default_reply=Echo("echo: ")).start()
    server = LiveServer(workers=2, env={**LIVE_ENV, "AGENTSITE_WORKER_HEADER": "1"}).start()
    try:
        every_worker_answers(server)  # the tests count on their requests reaching both
        token = server.login()["token"]
        headers = {"Authorization": f"Bearer {token}", "Connection": "close"}
        requests.patch(f"{server.base_url}/api/config", headers=headers, timeout=30, json={
            "provider": "openai", "base_url": upstream.base_url, "api_key": UPSTREAM_KEY,
            "model": "fake-model"}).raise_for_status()
        made = requests.post(f"{server.base_url}/api/agents", headers=headers, timeout=30, json={
            "slug": "echoer", "name": "Echoer", "instructions": "Version one.", "tools": []})
        assert made.status_code == 201, made.text
        yield server, headers, token, upstream, made.json()["id"]
    finally:
        server.stop()
        upstream.stop()


async def ask_in_sessions(url: str, token: str) -> list[Answers]:
    async def one(index: int) -> Answers:
        answers = Answers()
        async with asyncio.timeout(60), mcp_session(url, token, answers, workers=2) as session:
            await session.initialize()
            assert "ask_echoer" in {tool.name for tool in (await session.list_tools()).tools}
            for call in range(CALLS):
                result = await session.call_tool("ask_echoer", {"message": f"hello {index}.{call}"})
                assert result.is_error is False, result
                assert result.content[0].text == f"echo: hello {index}.{call}"
        return answers

    return list(await asyncio.gather(*(one(index) for index in range(SESSIONS))))


def systems(upstream: FakeOpenAI) -> set[str]:
    return {body["messages"][0]["content"] for body in upstream.bodies()}


async def test_a_sessions_calls_answer_on_either_worker_and_an_edit_counts_on_both(two_workers):
    server, headers, token, upstream, agent_id = two_workers
    # Each session's messages go to the workers in turn (mcp_session's `workers`): a new connection would go to
    # whichever wakes first, on a loaded machine the same one every time.
    sessions = await ask_in_sessions(f"{server.base_url}/mcp", token)
    assert all(len(answers.workers("POST")) == 2 for answers in sessions), [a.seen for a in sessions]
    assert systems(upstream) == {"Version one."}

    edited = requests.patch(f"{server.base_url}/api/agents/{agent_id}", headers=headers, timeout=30,
                            json={"instructions": "Version two."})
    assert edited.status_code == 200, edited.text
    upstream.reset()
    sessions = await ask_in_sessions(f"{server.base_url}/mcp", token)
    assert all(len(answers.workers("POST")) == 2 for answers in sessions), [a.seen for a in sessions]
    assert systems(upstream) == {"Version two."}

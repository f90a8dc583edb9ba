"""A stop whose announcement never reaches the stream's process: two hosts on PostgreSQL without Redis, where no
invalidation channel joins them (agentsite.core.invalidation). The turn's own checkpoints, which go on while a
tool runs, find the reply stopped and end it; the stop request answers once the turn stored it."""

from __future__ import annotations

import math

import pytest
import requests

from tests.e2e import UPSTREAM_KEY, sse_events
from tests.fakes.http import FakeResponse
from tests.fakes.llm import Call, ToolCalls
from tests.server import TwoHosts, two_hosts_possible

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not two_hosts_possible(), reason="two hosts need PostgreSQL")]


def test_a_stop_on_another_host_without_redis_ends_the_turn_at_its_next_checkpoint(fake_openai_server, fake_openai,
                                                                                  fake_web):
    hosts = TwoHosts(env={"REDIS_URL": "", "AGENTSITE_ALLOW_PRIVATE_FETCH": "1"}).start()
    try:
        streaming, stopping = hosts.hosts
        admin = {"Authorization": f"Bearer {hosts.login()['token']}"}
        configured = requests.patch(f"{streaming.base_url}/api/config", headers=admin, timeout=20, json={
            "provider": "openai", "base_url": fake_openai_server.base_url, "api_key": UPSTREAM_KEY,
            "model": "fake-model", "kb_enabled": False})
        assert configured.status_code == 200, configured.text
        session = requests.post(f"{streaming.base_url}/api/sessions", json={"name": "no channel"}, headers=admin,
                                timeout=20).json()["id"]
        fake_web.route("/never", FakeResponse.text("<p>never</p>", content_type="text/html", delay=math.inf))
        fake_openai.script(ToolCalls([Call("web_fetch", {"url": fake_web.url("/never")}, id="c1")], text="Looking."))
        with requests.post(f"{streaming.base_url}/api/sessions/{session}/chat", json={"message": "Fetch it"},
                           headers=admin, stream=True, timeout=30) as response:
            events = (event for event in sse_events(response) if event[0] != "comment")
            start = next(events)
            assert next(name for name, _ in events if name == "tool_call")  # the tool now waits on the page
            stopped = requests.post(f"{stopping.base_url}/api/sessions/{session}/messages/"
                                    f"{start[1]['message_id']}/stop", headers=admin, timeout=30)
            rest = list(events)
        assert stopped.status_code == 200, stopped.text
        assert (stopped.json()["status"], stopped.json()["content"]) == ("stopped", "Looking.")
        assert [step["result"] for step in stopped.json()["steps"]] == [None]  # the call never finished
        assert [name for name, _ in rest] == ["done"] and rest[0][1]["status"] == "stopped", rest
    finally:
        hosts.stop()

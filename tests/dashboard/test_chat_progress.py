"""A running tool step shows what the tool reports (tool_progress), in a real Chromium against a real server: a
remote A2A agent called as a tool says what it does, and its answer so far, until the step has its result."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import requests
from playwright.sync_api import expect

from tests.a2a_app.remote_agent import RemoteAgent, Served
from tests.dashboard.conftest import DESKTOP, TIMEOUT_MS, log_in
from tests.fakes.llm import Call, Text, ToolCalls
from tests.server import LiveServer

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def site(fake_openai_server) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    # Loopback fetches allowed: the remote agent is on 127.0.0.1.
    server = LiveServer(command="daphne", env={"AGENTSITE_LOGIN_RATE_LIMIT": "1000",
                                               "AGENTSITE_ALLOW_PRIVATE_FETCH": "1"}).start()
    remote = Served(RemoteAgent(name="Slow steps", streaming=True, steps_pause=3.0)).start()
    try:
        headers = {"Authorization": f"Bearer {server.login()['token']}"}
        requests.patch(f"{server.base_url}/api/config", headers=headers, timeout=10, json={
            "provider": "openai", "base_url": fake_openai_server.base_url, "api_key": "sk-dashboard-test",
            "model": "fake-model", "tools": ["a2a_steps"]}).raise_for_status()
        made = requests.post(f"{server.base_url}/api/a2a/remotes", headers=headers, timeout=10,
                             json={"name": "steps", "url": remote.agent.base_url})
        assert made.status_code == 201, made.text
        yield server, headers
    finally:
        remote.stop()
        server.stop()


def test_a_running_step_shows_the_remote_agents_progress_then_its_result(site, browser, fake_openai):
    server, _headers = site
    fake_openai.script(ToolCalls([Call("a2a_steps", {"message": "steps please"}, id="call_1")]), Text("Got it."))
    context = browser.new_context(viewport=DESKTOP, base_url=server.base_url)
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    try:
        log_in(page, server, "admin", server.admin_password)
        page.goto("/#/chat")
        page.get_by_label("Message").fill("Ask the steps agent")
        page.get_by_label("Message").press("Enter")
        reply = page.get_by_role("log").locator("article.message-assistant").last
        step = reply.locator("details.step")
        # While the remote pauses (3 s), the running row says what it told so far.
        expect(step.locator(".badge")).to_have_text("running…")
        expect(step.locator(".step-progress")).to_have_text(re.compile(r"^(looking it up|answering: first )$"))
        expect(step.locator(".step-progress")).to_have_attribute("role", "status")
        # Then its result replaces the progress line.
        expect(reply).to_have_attribute("data-status", "complete")
        expect(step.locator(".badge")).to_have_text("ok")
        expect(step.locator(".step-progress")).to_have_count(0)
        step.locator("summary").click()
        expect(step.locator(".step-result")).to_have_text("first second")
        assert problems == []
    finally:
        context.close()

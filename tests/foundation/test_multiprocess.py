"""Two full servers (`manage.py serve`: daphne and a task cluster each) on one PostgreSQL database and one
Redis, as two hosts of one deployment would be: what one process does, the other sees (issue 15, item 2).

PostgreSQL + Redis only (CI's second pass): SQLite is one host's database.
"""

from __future__ import annotations

import collections
import os
from datetime import UTC, datetime, timedelta

import pytest
import requests

from tests.e2e import UPSTREAM_KEY, poll, sse_events
from tests.fakes.llm import Text
from tests.plugins.conftest import write
from tests.scheduler.live import tasks_due_at
from tests.server import LiveServer

pytestmark = [pytest.mark.skipif(
    not os.environ.get("DATABASE_URL", "").startswith("postgres") or not os.environ.get("REDIS_URL"),
    reason="two hosts share PostgreSQL and Redis (set DATABASE_URL and REDIS_URL; CI's second pass does)"),
    pytest.mark.e2e]

SHARED = {"AGENTSITE_CACHE_PREFIX": "multi-{}", "AGENTSITE_Q_NAME": "multi-{}",
          "AGENTSITE_LOGIN_RATE_LIMIT": "10", "AGENTSITE_TRUSTED_PROXIES": "1",
          "AGENTSITE_SCHEDULER_RUNNER": "tests.scheduler.runners.recording_runner"}
PLUGIN = '''
    from plugins.sdk import tool

    @tool
    def shared_answer() -> str:
        """The shared plugin's answer."""
        return "from the shared plugin directory"
'''


@pytest.fixture(scope="module")
def pair(fake_openai_server):
    tag = os.urandom(4).hex()
    env = {key: value.format(tag) for key, value in SHARED.items()}
    first = LiveServer(env=env).start()
    # The second host: the same database, Redis, secrets and plugin directory (a shared data directory).
    second = LiveServer(env=env, data_dir=str(first.data_dir), database_url=first.database_url, migrated=False)
    second.log_path = first.data_dir / "second.log"
    second.start()
    try:
        yield first, second, auth(first.login()["token"])
    finally:
        second.stop(drop_database=False)
        first.stop()


def auth(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def test_tokens_documents_config_and_plugins_made_through_one_are_seen_through_the_other(pair, fake_openai):
    first, second, admin = pair
    registered = requests.post(f"{first.base_url}/api/auth/register", timeout=10,
                               json={"username": "roamer", "password": "correct-horse-battery-9"})
    assert registered.status_code == 201, registered.text
    tokens = registered.json()
    assert requests.get(f"{second.base_url}/api/auth/me", headers=auth(tokens["token"]), timeout=10).json()[
        "username"] == "roamer"

    # A document added through one is found through the other at once.
    added = requests.post(f"{first.base_url}/api/kb/documents", headers=auth(tokens["token"]), timeout=10,
                          json={"filename": "harbour.md", "content": "The harbour of Kestrel Bay opens at dawn."})
    assert added.status_code == 201, added.text
    found = requests.post(f"{second.base_url}/api/kb/search", headers=auth(tokens["token"]), timeout=10,
                          json={"query": "When does the Kestrel Bay harbour open?"}).json()
    assert "Kestrel Bay" in found["results"][0]["chunk"]["text"]

    # A config change through one reaches the other's agent (polled, bounded by the deadline below).
    configured = requests.patch(f"{first.base_url}/api/config", headers=admin, timeout=10, json={
        "provider": "openai", "base_url": fake_openai.base_url, "api_key": UPSTREAM_KEY, "model": "fake-model",
        "system_prompt": "You are the harbour master.", "kb_enabled": False})
    assert configured.status_code == 200, configured.text
    session = requests.post(f"{second.base_url}/api/sessions", headers=admin, json={}, timeout=10).json()

    def system_prompt_seen() -> bool:
        fake_openai.script(Text("Aye."))
        with requests.post(f"{second.base_url}/api/sessions/{session['id']}/chat", headers=admin, stream=True,
                           json={"message": "Who are you?"}, timeout=30) as response:
            list(sse_events(response))
        sent = fake_openai.requests[-1].json()["messages"] if fake_openai.requests else []
        return bool(sent) and sent[0]["role"] == "system" and "harbour master" in sent[0]["content"]

    poll(system_prompt_seen, "the second server's agent using the new system prompt", timeout=5, every=0.3)

    # A plugin written into the shared directory loads in both.
    write(first.data_dir / "plugins" / "sharedplug.py", PLUGIN)
    for server in (first, second):
        answer = poll(lambda server=server: (response := requests.post(
            f"{server.base_url}/api/mcp/call", headers=admin, timeout=10,
            json={"server": "plugin:sharedplug", "tool": "shared_answer", "arguments": {}})).status_code == 200
            and response.json(), f"the plugin loaded by {server.base_url}", timeout=10)
        assert answer["content"][0]["text"] == "from the shared plugin directory"

    # A password change through one revokes the old token through the other at once.
    changed = requests.post(f"{first.base_url}/api/auth/change-password", headers=auth(tokens["token"]), timeout=10,
                            json={"old_password": "correct-horse-battery-9", "new_password": "another-horse-battery-7"})
    assert changed.status_code == 200, changed.text
    assert requests.get(f"{second.base_url}/api/auth/me", headers=auth(tokens["token"]), timeout=10).status_code == 401


def test_a_workflow_queued_on_one_runs_and_a_due_task_fires_once_across_both_clusters(pair):
    first, second, admin = pair
    workflow = requests.post(f"{first.base_url}/api/workflows", headers=admin, timeout=10, json={
        "name": "queued-anywhere", "nodes": [{"id": "start", "name": "start", "type": "input", "config": {}},
                                             {"id": "out", "name": "out", "type": "output", "config": {}}],
        "edges": [{"from": "start", "to": "out"}]}).json()
    queued = requests.post(f"{first.base_url}/api/workflows/{workflow['id']}/run", headers=admin, timeout=10,
                           json={"input": "across hosts", "async": True}).json()
    run = poll(lambda: (found := requests.get(f"{second.base_url}/api/workflows/runs/{queued['id']}", headers=admin,
                                              timeout=10).json())["status"] == "success" and found,
               "the queued run", timeout=30)
    assert run["output"] == "across hosts"

    # A yearly cron, due a few seconds from now (written into the shared database, announced through Redis to
    # both hosts' timers by a save through the second: tests/scheduler/live.py), whichever minute it is.
    task = requests.post(f"{second.base_url}/api/scheduler/tasks", headers=admin, timeout=10, json={
        "name": "yearly on two hosts", "cron": "0 0 1 1 *", "prompt": "tick"}).json()
    instant = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3)  # whole seconds: the API's form
    tasks_due_at(second, admin, [task["id"]], instant)

    def history() -> list[dict]:
        return requests.get(f"{first.base_url}/api/scheduler/history", params={"task": task["id"]}, headers=admin,
                            timeout=10).json()["results"]

    # Both hosts' timers wake for that instant together; the (task, scheduled_for) constraint lets one of them
    # record the run, and the task's next instant is next year, so no later tick (either cluster's fallback
    # included) has another occurrence to record. Each tick is one short transaction at the instant: by the
    # time the winner's run has been queued, run and finished, the other timer's tick is over.
    runs = poll(lambda: (found := history()) and all(item["status"] == "success" for item in found) and found,
                f"the run due at {instant.isoformat()} finished", timeout=30, every=0.25)
    per_instant = collections.Counter(item["scheduled_for"] for item in history())
    assert per_instant == {instant.isoformat().replace("+00:00", "Z"): 1}, per_instant
    assert [item["trigger"] for item in runs] == ["schedule"]


def test_the_login_budget_is_shared_by_both_servers(pair):
    """One client address (a proxy's X-Forwarded-For, believed: AGENTSITE_TRUSTED_PROXIES=1) whose budget
    nothing else has spent: the fixture's own log-ins come from loopback, within the same minute."""
    first, second, admin = pair
    client = {"X-Forwarded-For": f"203.0.113.{os.urandom(1)[0] % 250 + 1}"}
    statuses = [requests.post(f"{server.base_url}/api/auth/login", timeout=10, headers=client,
                              json={"username": "admin", "password": "wrong"}).status_code
                for server in [first, second] * 5 + [first]]
    assert statuses == [401] * 10 + [429]
    assert requests.post(f"{second.base_url}/api/auth/login", timeout=10, headers=client,
                         json={"username": "admin", "password": "wrong"}).status_code == 429

"""The scheduler end to end: `manage.py serve` (daphne and the real django-q2 cluster) fires a task through
the tick that django-q2's own schedule calls, and the run appears in the history.

The tick runs at the production interval (AGENTSITE_SCHEDULER_TICK_S unset: 60 s, django-q2's minutes
schedule; there is no shorter path to take instead). Its cost, bounded: the task fires at the next minute
boundary (up to 60 s after it is made), the tick that finds it comes up to one tick period later (60 s),
and django-q2 looks at its schedules every 30 s: up to ~150 s, ~90 s on average, spent polling twice a
second. One test in the suite pays it; the tick's logic itself is covered with a controlled clock
(test_tick.py).
"""

from __future__ import annotations

import requests

from tests.e2e import poll
from tests.server import LiveServer


def test_the_real_cluster_fires_a_task_through_the_tick_and_the_run_appears_in_the_history():
    server = LiveServer().start()
    assert "AGENTSITE_SCHEDULER_TICK_S" not in server.env(), "the production interval, as shipped"
    try:
        headers = {"Authorization": f"Bearer {server.login()['token']}"}
        created = requests.post(f"{server.base_url}/api/scheduler/tasks", headers=headers, timeout=10, json={
            "name": "every minute", "cron": "* * * * *", "prompt": "scheduled hello"})
        assert created.status_code == 201, created.text
        task = created.json()

        def history() -> list[dict]:
            return requests.get(f"{server.base_url}/api/scheduler/history", params={"task": task["id"]},
                                headers=headers, timeout=10).json()["results"]

        runs = poll(lambda: [run for run in history() if run["status"] in ("success", "error")],
                    "a scheduled run finished", timeout=180, every=0.5)  # waits on a 30 s beat: spare the CPU
        run = runs[0]
        assert (run["trigger"], run["status"]) == ("schedule", "success"), run
        assert "scheduled hello" in run["output"]  # the offline model echoes the prompt
        assert run["scheduled_for"] == task["next_run_at"]
        listed = requests.get(f"{server.base_url}/api/scheduler/tasks", headers=headers, timeout=10).json()
        assert listed["results"][0]["last_run_at"] == run["scheduled_for"]
    finally:
        server.stop()

"""The scheduler end to end: `manage.py serve` (daphne, the real django-q2 cluster, and the scheduler's timer on
serve's own thread) starts tasks made through the API at their instant, through the agent, and records each
occurrence once.

Cron has minute granularity; rather than wait for the wall clock's next minute, the test writes an instant a
few seconds ahead into the tasks' `next_run_at` (tests/scheduler/live.py) and a save through the API announces
it. The timer's logic is covered on sub-second instants in test_timer.py, the tick's with a controlled clock in
test_tick.py. The tasks are saved in a daphne process, the timer runs in serve: the wake crosses processes
(through Redis when the run has it, else on SQLite the host's doorbell).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import requests

from tests.e2e import in_parallel, poll
from tests.scheduler.live import tasks_due_at
from tests.server import LiveServer

pytestmark = pytest.mark.e2e  # every test here starts a process

TASKS = 20
AHEAD_S = 3  # the instant is at least this far ahead of its writing: the announcement reaches the timers first
# How late a run may start: the timer's own wake is within milliseconds (test_timer.py); the rest is the queue
# and a loaded machine. Without the timer the runs would wait for the fallback tick (every 60 s).
LATE_S = 5.0


def test_tasks_made_through_the_api_start_at_their_instant_once_each():
    server = LiveServer().start()
    assert "AGENTSITE_SCHEDULER_TICK_S" not in server.env(), "the production settings, as shipped"
    try:
        headers = {"Authorization": f"Bearer {server.login()['token']}"}

        def create(index: int) -> dict:
            # A yearly cron: its next occurrence after the written instant is months away, so the run of that
            # instant is the one occurrence due (on time: a `schedule` run), whichever minute the test runs in.
            created = requests.post(f"{server.base_url}/api/scheduler/tasks", headers=headers, timeout=20, json={
                "name": f"yearly {index}", "cron": "0 0 1 1 *", "prompt": f"scheduled hello {index}"})
            assert created.status_code == 201, created.text
            return created.json()

        tasks = in_parallel(8, lambda batch: [create(index) for index in range(batch, TASKS, 8)])
        tasks = [task for batch in tasks for task in batch]
        instant = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=AHEAD_S + 1)  # the API gives seconds
        tasks_due_at(server, headers, [task["id"] for task in tasks], instant)

        def finished() -> list[dict]:
            runs = requests.get(f"{server.base_url}/api/scheduler/history", params={"limit": 200},
                                headers=headers, timeout=20).json()["results"]
            return [run for run in runs if run["status"] in ("success", "error")]

        runs = poll(lambda: (done := finished()) and len({run["task_id"] for run in done}) == TASKS and done,
                    f"a finished run for each of the {TASKS} tasks due at {instant.isoformat()}", timeout=60, every=0.5)
        assert len(runs) == TASKS, "each occurrence once"  # the unique (task, instant) across the cluster
        for run in runs:
            assert (run["trigger"], run["status"]) == ("schedule", "success"), json.dumps(run)
            assert f"scheduled hello {run['task_name'].rsplit(' ', 1)[1]}" in run["output"]  # the offline model
            assert datetime.fromisoformat(run["scheduled_for"]) == instant, run
            lag = (datetime.fromisoformat(run["started_at"]) - instant).total_seconds()
            assert 0 <= lag < LATE_S, f"started {lag:.3f} s after its instant: {json.dumps(run)}"
    finally:
        server.stop()

"""The scheduler end to end: `manage.py serve` (daphne, the real django-q2 cluster, and the scheduler's timer on
serve's own thread) starts tasks made through the API at their instant, through the agent, and records each
occurrence once.

Cron has minute granularity, so the tasks fire at the next minute boundary: this test waits up to a minute
(30 s on average) for it, the one test in the suite that does; the timer's logic is covered on sub-second
instants in test_timer.py, the tick's with a controlled clock in test_tick.py. The tasks are made in a daphne
process, the timer runs in serve: the wake crosses processes (through Redis when the run has it, else the
timer's look at the database every second).
"""

from __future__ import annotations

import json
from datetime import datetime

import pytest
import requests

from tests.e2e import in_parallel, poll
from tests.server import LiveServer

pytestmark = pytest.mark.e2e  # every test here starts a process

TASKS = 20


def test_tasks_made_through_the_api_start_within_a_second_of_their_instant_once_each():
    server = LiveServer().start()
    assert "AGENTSITE_SCHEDULER_TICK_S" not in server.env(), "the production settings, as shipped"
    try:
        headers = {"Authorization": f"Bearer {server.login()['token']}"}

        def create(index: int) -> dict:
            created = requests.post(f"{server.base_url}/api/scheduler/tasks", headers=headers, timeout=20, json={
                "name": f"every minute {index}", "cron": "* * * * *", "prompt": f"scheduled hello {index}"})
            assert created.status_code == 201, created.text
            return created.json()

        tasks = in_parallel(8, lambda batch: [create(index) for index in range(batch, TASKS, 8)])
        tasks = [task for batch in tasks for task in batch]

        def history() -> list[dict]:
            return requests.get(f"{server.base_url}/api/scheduler/history", params={"limit": 200},
                                headers=headers, timeout=20).json()["results"]

        # Each task's first occurrence after its creation (a loaded machine may reach the next minute's too).
        first_instant = {task["id"]: task["next_run_at"] for task in tasks}

        def first_runs() -> list[dict]:
            return [run for run in history() if run["status"] in ("success", "error")
                    and run["scheduled_for"] == first_instant.get(run["task_id"])]

        runs = poll(lambda: (done := first_runs()) and len({run["task_id"] for run in done}) == TASKS and done,
                    f"{TASKS} scheduled runs finished", timeout=100, every=0.5)
        assert len(runs) == TASKS, "each occurrence once"  # the unique (task, instant) across the cluster
        for run in runs:
            assert (run["trigger"], run["status"]) == ("schedule", "success"), json.dumps(run)
            assert f"scheduled hello {run['task_name'].rsplit(' ', 1)[1]}" in run["output"]  # the offline model
            # The first occurrence after creation; a task made across a minute boundary may have another one.
            assert run["scheduled_for"] == first_instant[run["task_id"]]
            lag = (datetime.fromisoformat(run["started_at"]) - datetime.fromisoformat(run["scheduled_for"]))
            assert 0 <= lag.total_seconds() < 1.0, run
    finally:
        server.stop()

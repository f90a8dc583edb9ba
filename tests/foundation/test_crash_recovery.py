"""Killed processes: the work they left running is marked (with a reason) on restart, by `serve` when it sees
a child die, and by the heartbeat sweeps of the processes still alive, while live work elsewhere is never
touched (agentsite/core/processes.py)."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
from urllib.parse import urlsplit

import pytest
import requests

from tests.e2e import poll
from tests.server import PREPARE, ROOT, LiveServer
from tests.workflows.conftest import graph, node

pytestmark = pytest.mark.e2e  # every test here starts a process

# django-q2's line once a cluster takes tasks: "Q Cluster <name> [<queue>] running."
CLUSTER_RUNNING = re.compile(r"Q Cluster \S+ \[[^\]]*\] running\.")
QUICK = {"AGENTSITE_PROCESS_SWEEP_S": "0.3", "AGENTSITE_PROCESS_HEARTBEAT_S": "0.2",
         "AGENTSITE_LOGIN_RATE_LIMIT": "1000", "AGENTSITE_ORPHAN_GRACE_S": "2"}


def slow_workflow(base_url: str, headers: dict, name: str, delay_ms: int) -> str:
    created = requests.post(f"{base_url}/api/workflows", headers=headers, timeout=10, json={"name": name, **graph(
        node("start", "input"), node("wait", "delay", delayMs=delay_ms), node("out", "output"),
        edges=[("start", "wait"), ("wait", "out")])})
    assert created.status_code == 201, created.text
    return created.json()["id"]


def run_in_background(base_url: str, headers: dict, workflow_id: str) -> None:
    def call() -> None:
        try:
            requests.post(f"{base_url}/api/workflows/{workflow_id}/run", headers=headers, timeout=120,
                          json={"input": "x"})
        except requests.RequestException:
            pass  # the server was killed under it

    threading.Thread(target=call, daemon=True).start()


def run_held_open(base_url: str, headers: dict, workflow_id: str) -> http.client.HTTPConnection:
    """A synchronous run whose caller waits for the answer until the returned connection is closed: the hang-up
    cancels the run (docs/api.md), so a test ends a long run when it has seen what it needed."""
    conn = http.client.HTTPConnection(urlsplit(base_url).netloc, timeout=10)
    conn.request("POST", f"/api/workflows/{workflow_id}/run", body=json.dumps({"input": "x"}),
                 headers={**headers, "Content-Type": "application/json"})
    return conn


def running_run(base_url: str, headers: dict, workflow_id: str) -> dict:
    return poll(lambda: next((run for run in requests.get(f"{base_url}/api/workflows/{workflow_id}/runs",
                                                          headers=headers, timeout=10).json()["results"]
                              if run["status"] == "running"), None), "a running run", timeout=20)


def run_status(base_url: str, headers: dict, run_id: str) -> dict:
    return requests.get(f"{base_url}/api/workflows/runs/{run_id}", headers=headers, timeout=10).json()


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def children_with(pid: int, marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                command = cmdline.read().decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and marker in command:
            found.append(int(entry))
    return found


def descendants(pid: int) -> list[int]:
    found, level = [], children_with(pid, "")
    while level:
        found += level
        level = [child for parent in level for child in children_with(parent, "")]
    return found


def test_serve_marks_the_runs_of_a_killed_daphne_and_a_killed_cluster_and_serves_on(tmp_path):
    server = LiveServer(data_dir=str(tmp_path), env=QUICK, migrated=True)
    proc = server.launch(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        server.wait_healthy(60)
        headers = {"Authorization": f"Bearer {server.login()['token']}"}
        in_daphne = slow_workflow(server.base_url, headers, "in-daphne", 60_000)
        in_worker = slow_workflow(server.base_url, headers, "in-worker", 60_000)
        run_in_background(server.base_url, headers, in_daphne)
        queued = requests.post(f"{server.base_url}/api/workflows/{in_worker}/run", headers=headers, timeout=10,
                               json={"input": "x", "async": True}).json()
        daphne_run = running_run(server.base_url, headers, in_daphne)
        poll(lambda: run_status(server.base_url, headers, queued["id"])["status"] == "running",
             "the worker running its run", timeout=30)

        for marker in ("daphne", "qcluster"):
            for pid in children_with(proc.pid, marker):
                os.kill(pid, signal.SIGKILL)
        server.wait_healthy(30)

        for run_id in (daphne_run["id"], queued["id"]):
            stored = poll(lambda run_id=run_id: (found := run_status(server.base_url, headers, run_id))["status"]
                          != "running" and found, "the killed run marked", timeout=15)
            assert stored["status"] == "error" and "stopped" in stored["error"]["message"], stored
        assert proc.poll() is None

        # serve killed outright while a worker is busy: its children get SIGTERM from the kernel (their
        # parent-death signal); the cluster's graceful stop would wait for the busy worker's 60 s task, so each
        # child's guard (agentsite/server/orphan.py) kills its group AGENTSITE_ORPHAN_GRACE_S (2 s here) after serve.
        busy = requests.post(f"{server.base_url}/api/workflows/{in_worker}/run", headers=headers, timeout=10,
                             json={"input": "x", "async": True}).json()
        poll(lambda: run_status(server.base_url, headers, busy["id"])["status"] == "running",
             "a worker busy with a 60 s run", timeout=30)
        family = descendants(proc.pid)
        assert len(family) >= 4, family  # daphne, the cluster and its workers
        os.kill(proc.pid, signal.SIGKILL)
        poll(lambda: not any(_running(pid) for pid in family), "every process under serve gone after serve was "
             "killed, the busy worker's too, well before its task's 60 s", timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        server.stop()


def test_a_killed_daphne_is_swept_by_its_peer_and_a_restart_never_marks_live_work():
    first = LiveServer(command="daphne", env=QUICK).start()
    second = LiveServer(command="daphne", env=QUICK, data_dir=str(first.data_dir), database_url=first.database_url,
                        migrated=False)
    second.log_path = first.data_dir / "second.log"
    second.start()
    try:
        headers = {"Authorization": f"Bearer {first.login()['token']}"}
        # The survivor runs until this test hangs up on it (far longer than the kill, the sweep and the restart
        # below take on a loaded machine: a 15 s run once finished before the restart did).
        survivor = slow_workflow(first.base_url, headers, "survivor", 120_000)
        victim = slow_workflow(first.base_url, headers, "victim", 60_000)
        caller = run_held_open(first.base_url, headers, survivor)
        live = running_run(first.base_url, headers, survivor)
        run_in_background(second.base_url, headers, victim)
        killed = running_run(second.base_url, headers, victim)

        os.killpg(second.proc.pid, signal.SIGKILL)
        second.proc.wait()
        # The first server's heartbeat sweep finds the second's pid gone and marks its run.
        stored = poll(lambda: (found := run_status(first.base_url, headers, killed["id"]))["status"] != "running"
                      and found, "the killed server's run marked by its peer", timeout=10)
        assert stored["status"] == "error" and "stopped" in stored["error"]["message"]

        # A restart of the second server (its start-up recovery) leaves the first server's live run alone.
        subprocess.run([sys.executable, "-c", PREPARE], cwd=ROOT, env=second.env(), check=True, capture_output=True)
        assert run_status(first.base_url, headers, live["id"])["status"] == "running"
        caller.close()  # the hang-up ends the live run as its own (cancelled), not as a dead process's (error)
        finished = poll(lambda: (found := run_status(first.base_url, headers, live["id"]))["status"] != "running"
                        and found, "the live run to end when its caller hung up", timeout=30)
        assert finished["status"] == "cancelled", finished
    finally:
        second.stop(drop_database=False)
        first.stop()


def test_a_reply_streaming_when_daphne_is_killed_is_kept_as_interrupted_with_what_was_generated(fake_openai_server,
                                                                                              fake_openai):
    from tests.e2e import UPSTREAM_KEY, sse_events
    from tests.fakes.llm import Hang

    server = LiveServer(command="daphne", env=QUICK).start()
    try:
        headers = {"Authorization": f"Bearer {server.login()['token']}"}
        requests.patch(f"{server.base_url}/api/config", headers=headers, timeout=10, json={
            "provider": "openai", "base_url": fake_openai.base_url, "api_key": UPSTREAM_KEY,
            "model": "fake-model"}).raise_for_status()
        session = requests.post(f"{server.base_url}/api/sessions", json={"name": "crash"}, headers=headers,
                                timeout=10).json()
        fake_openai.script(Hang(text="Once upon a time "))
        response = requests.post(f"{server.base_url}/api/sessions/{session['id']}/chat", headers=headers,
                                 json={"message": "Tell me a story."}, stream=True, timeout=30)
        streamed = ""
        for name, data in sse_events(response):
            streamed += data["content"] if name == "delta" else ""
            if streamed == "Once upon a time ":
                break
        messages_url = f"{server.base_url}/api/sessions/{session['id']}/messages"
        poll(lambda: requests.get(messages_url, headers=headers, timeout=10).json()["results"][-1]["content"]
             == "Once upon a time ", "the checkpoint of the streaming reply")

        os.killpg(server.proc.pid, signal.SIGKILL)
        server.proc.wait()
        response.close()
        server.start()  # the restart's recovery marks what the killed process was streaming

        messages = requests.get(messages_url, headers=headers, timeout=10).json()["results"]
        assert [(m["role"], m["content"], m["status"]) for m in messages] == [
            ("user", "Tell me a story.", "complete"), ("assistant", "Once upon a time ", "interrupted")]
    finally:
        server.stop()


def test_a_scheduled_run_in_a_killed_cluster_or_a_killed_serve_is_marked_and_nothing_else_is_lost(
        tmp_path, fake_openai_server, fake_openai):
    from tests.e2e import UPSTREAM_KEY
    from tests.fakes.llm import Hang, Text

    server = LiveServer(data_dir=str(tmp_path), env=QUICK, migrated=True)
    server.log_path = tmp_path / "serve.log"
    serve = server.launch  # again after the crash: on the same socket, which this test held all along

    proc = serve()
    try:
        server.wait_healthy(60)
        headers = {"Authorization": f"Bearer {server.login()['token']}"}
        requests.patch(f"{server.base_url}/api/config", headers=headers, timeout=10, json={
            "provider": "openai", "base_url": fake_openai.base_url, "api_key": UPSTREAM_KEY,
            "model": "fake-model"}).raise_for_status()
        task = requests.post(f"{server.base_url}/api/scheduler/tasks", headers=headers, timeout=10, json={
            "name": "nightly digest", "cron": "0 3 * * *", "prompt": "Summarise the day."}).json()

        def history() -> list[dict]:
            return requests.get(f"{server.base_url}/api/scheduler/history", params={"task": task["id"]},
                                headers=headers, timeout=10).json()["results"]

        def run_now(reply) -> dict:
            fake_openai.script(reply)  # scripted before the run exists, so the worker can never get there first
            started = requests.post(f"{server.base_url}/api/scheduler/run/{task['id']}", headers=headers, timeout=10)
            assert started.status_code in (200, 201, 202), started.text
            return started.json()

        def finished(run_id: str) -> dict:
            return poll(lambda: next((run for run in history() if run["id"] == run_id
                                      and run["status"] not in ("queued", "running")), None), "a finished run", 40)

        def hung_and_running() -> dict:
            hung = run_now(Hang(text="Today "))
            poll(lambda: any(run["id"] == hung["id"] and run["status"] == "running" for run in history()),
                 "the cluster running the scheduled run", timeout=30)
            # Killed only once its request is at the upstream: else the next run would get the hanging reply.
            poll(lambda: fake_openai.pending == 0, "the scheduled run's request at the upstream", timeout=30)
            return hung

        def tasks() -> list[tuple]:
            kept = requests.get(f"{server.base_url}/api/scheduler/tasks", headers=headers, timeout=10).json()
            return [(t["id"], t["name"], t["enabled"], t["cron"], t["prompt"]) for t in kept["results"]]

        # A finished run first: it must survive both crashes as it was.
        first = finished(run_now(Text("A quiet day."))["id"])
        assert (first["status"], first["output"]) == ("success", "A quiet day."), first
        the_task = tasks()
        assert the_task == [(task["id"], "nightly digest", True, "0 3 * * *", "Summarise the day.")]

        # 1. The cluster killed under a running scheduled run: serve marks it and restarts the cluster.
        hung = hung_and_running()
        for pid in children_with(proc.pid, "qcluster"):
            os.kill(pid, signal.SIGKILL)
        marked = poll(lambda: next((run for run in history() if run["id"] == hung["id"]
                                    and run["status"] != "running"), None), "the killed run marked", timeout=30)
        assert marked["status"] == "error" and "stopped" in marked["error"], marked
        assert marked["finished_at"], marked
        # The restart is a fresh interpreter (serve forks only at its first start), slow on a loaded machine:
        # waited for on its own, so that a slow start is not read as new work left untaken.
        poll(lambda: len(CLUSTER_RUNNING.findall(server.log_path.read_text(errors="replace"))) >= 2,
             "the task cluster running again", 90)
        again = finished(run_now(Text("Another quiet day."))["id"])  # the restarted cluster takes new work
        assert (again["status"], again["output"]) == ("success", "Another quiet day."), again

        # 2. The whole server killed, as a crash of its machine or container would: serve and every process
        # under it stopped first (none can react), then killed. Then started again on the same data.
        hung_too = hung_and_running()
        before = {run["id"]: run for run in history()}
        tree = descendants(proc.pid)
        assert len(tree) >= 4, tree  # daphne, the cluster and its workers
        for signum in (signal.SIGSTOP, signal.SIGKILL):
            for pid in (proc.pid, *tree):
                os.kill(pid, signum)
        proc.wait()
        poll(lambda: not any(_running(pid) for pid in tree), "every process of the killed server gone", 10)
        proc = serve()
        server.wait_healthy(60)
        headers["Authorization"] = f"Bearer {server.login()['token']}"
        marked_too = poll(lambda: next((run for run in history() if run["id"] == hung_too["id"]
                                        and run["status"] != "running"), None), "the run marked on restart", 30)
        assert marked_too["status"] == "error" and "stopped" in marked_too["error"], marked_too
        after = {run["id"]: run for run in history()}
        assert after.keys() == before.keys()  # no run lost, none invented
        # Every other run is exactly as it was: the first, the cluster's victim, the one after it.
        assert {k: v for k, v in after.items() if k != hung_too["id"]} == {
            k: v for k, v in before.items() if k != hung_too["id"]}
        assert after[first["id"]] == first and after[hung["id"]] == marked
        assert tasks() == the_task
        last = finished(run_now(Text("A third quiet day."))["id"])
        assert (last["status"], last["output"]) == ("success", "A third quiet day."), last
    except AssertionError as failure:  # what serve and its cluster said, without the test's own polling
        said = [line for line in server.log_path.read_text(errors="replace").splitlines()
                if "GET /api/scheduler/history" not in line]
        raise AssertionError(f"{failure}\n--- serve's log, the last 80 lines but the history polls:\n"
                             + "\n".join(said[-80:])) from failure
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        server.stop()

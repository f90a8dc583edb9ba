"""What a run waiting for an approval costs while it waits: nothing that grows with the number of them.

    python bench/approvals.py                 # 10,000 waiting runs
    python bench/approvals.py --runs 2000

Starts `manage.py serve` (daphne and the task cluster; SQLite), creates input -> approval -> output, and
starts runs of it over HTTP (synchronous, concurrency 8): each stops `waiting` with its pending approval.
After a warm-up of 200 runs, and then at each step, it waits for the server to settle and prints the whole
process tree's resident memory (sum of RSS), open file descriptors and threads. Flat figures (no growth
with the number of waiting runs) are what the issue asks (issue 31 item 5): a waiting run is a database row,
not a task, a thread or a connection. At the end it approves a hundred of them, to show they still resume.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LOAD = r"""
import asyncio, sys, aiohttp
base, token, workflow, count, concurrency = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
async def worker(client, left):
    while left:
        left.pop()
        async with client.post(f"{base}/api/workflows/{workflow}/run", json={"input": "x"}) as r:
            body = await r.json()
            assert r.status == 200 and body["status"] == "waiting", body
async def main():
    left = list(range(count))
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"},
                                     timeout=aiohttp.ClientTimeout(total=60)) as client:
        await asyncio.gather(*(worker(client, left) for _ in range(concurrency)))
asyncio.run(main())
"""


def tree(pid: int) -> list[int]:
    """The process and all its descendants."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, stack = [], [pid]
    while stack:
        current = stack.pop()
        found.append(current)
        stack += children.get(current, [])
    return found


def footprint(pid: int) -> tuple[float, int, int, int]:
    """(RSS MB, fds, threads, processes) of the tree."""
    rss, fds, threads, pids = 0, 0, 0, tree(pid)
    for member in pids:
        try:
            status = Path(f"/proc/{member}/status").read_text()
            rss += int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")))
            threads += int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads")))
            fds += len(os.listdir(f"/proc/{member}/fd"))
        except (OSError, StopIteration):
            continue
    return rss / 1024, fds, threads, len(pids)


def settle(pid: int) -> tuple[float, int, int, int]:
    """The footprint once two readings a second apart agree on fds and threads (at most 10 s)."""
    last = footprint(pid)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(1)
        now = footprint(pid)
        if now[1:] == last[1:]:
            return now
        last = now
    return last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    import requests

    from bench.workflows import machine
    from tests.server import LiveServer

    print(f"machine: {machine()}; {time.strftime('%Y-%m-%d')}")
    # One worker: figures comparable with earlier runs (LiveServer otherwise runs serve's default workers).
    server = LiveServer(env={"AGENTSITE_LOGIN_RATE_LIMIT": "1000"}, workers=1).start()
    try:
        token = server.login()["token"]
        headers = {"Authorization": f"Bearer {token}"}
        data = {"name": "gated", "nodes": [
            {"id": "in", "type": "input", "name": "in"},
            {"id": "ask", "type": "approval", "name": "ask", "config": {"prompt": "ok ${in}?", "timeout_s": 86400}},
            {"id": "out", "type": "output", "name": "out"}],
            "edges": [{"from": "in", "to": "ask"}, {"from": "ask", "to": "out"}]}
        workflow = requests.post(f"{server.base_url}/api/workflows", json=data, headers=headers, timeout=30).json()

        def start(count: int) -> float:
            began = time.perf_counter()
            subprocess.run([sys.executable, "-c", LOAD, server.base_url, token, workflow["id"], str(count),
                            str(args.concurrency)], check=True)
            return count / (time.perf_counter() - began)

        start(200)
        waiting = 200
        rss, fds, threads, procs = settle(server.proc.pid)
        print(f"{waiting:>6} waiting: {rss:8.1f} MB RSS, {fds:4d} fds, {threads:4d} threads, {procs} processes")
        step = (args.runs - waiting) // args.steps
        for _ in range(args.steps):
            rate = start(step)
            waiting += step
            rss, fds, threads, procs = settle(server.proc.pid)
            print(f"{waiting:>6} waiting: {rss:8.1f} MB RSS, {fds:4d} fds, {threads:4d} threads, {procs} processes"
                  f"  (started at {rate:.0f} runs/s)")
        listed = requests.get(f"{server.base_url}/api/approvals?limit=100", headers=headers, timeout=60).json()
        print(f"pending approvals listed: {listed['count']}")
        began = time.perf_counter()
        for approval in listed["results"]:
            requests.post(f"{server.base_url}/api/approvals/{approval['id']}", json={"decision": "approve"},
                          headers=headers, timeout=30).raise_for_status()
        ids = [approval["run_id"] for approval in listed["results"]]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            statuses = {requests.get(f"{server.base_url}/api/workflows/runs/{run_id}", headers=headers,
                                     timeout=30).json()["status"] for run_id in ids}
            if statuses == {"success"}:
                break
            time.sleep(0.5)
        print(f"100 approved and resumed by the task cluster in {time.perf_counter() - began:.1f} s: {statuses}")
        rss, fds, threads, procs = settle(server.proc.pid)
        print(f"after: {rss:8.1f} MB RSS, {fds:4d} fds, {threads:4d} threads, {procs} processes")
    finally:
        server.stop()


if __name__ == "__main__":
    main()

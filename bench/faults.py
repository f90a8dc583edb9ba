"""Load with faults: concurrent streaming chats that hang up at random, concurrent workflow runs with sandbox
evaluations (some streamed and hung up), and scheduled runs firing meanwhile, for several rounds against one
real server (`manage.py serve`: daphne and its task cluster, SQLite by default, PostgreSQL/Redis from the
environment), on loopback only.

    python bench/faults.py [--rounds 3] [--chats 50] [--workflows 50] [--scheduled 5] [--seed 7]

A fake OpenAI upstream runs in a process of its own, streaming --tokens tokens --delay-ms apart, so hang-ups
land mid-stream. After each round, once the work has settled, it checks: no 5xx; every chat's user message
stored and every reply final (complete or interrupted); every workflow run and scheduled run in a final
state. Before the first round and after each, it counts daphne's threads, open file descriptors, sandbox
worker processes and resident memory, and the cluster's processes. It prints a table and verdicts and exits
1 on a violation: a 5xx, lost or unsettled work, a count that keeps growing (after the last round above its
value after every earlier one: pools fill in the first rounds, a leak grows every round), or memory more
than 15% above its first round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FINAL_REPLY = {"complete", "interrupted", "error"}
FINAL_RUN = {"success", "error", "cancelled", "skipped"}


def serve_upstream(tokens: int, delay_ms: float) -> None:
    from tests.fakes.llm import FakeOpenAI, Text

    class Upstream(FakeOpenAI):
        def record(self, request):  # noqa: ANN001 - keep none of thousands of requests
            return False

    words = [f"w{i} " for i in range(tokens)]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with Upstream(default_reply=Text("".join(words), pieces=words, delay=delay_ms / 1000)) as fake:
        print(fake.base_url, flush=True)
        stop.wait()


# --- the server's processes, from /proc ---


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def status_field(pid: int, name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    return 0


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        for child in children(todo.pop()):
            out.append(child)
            todo.append(child)
    return out


def counts(serve_pid: int) -> dict[str, float]:
    daphne = next(pid for pid in children(serve_pid) if "daphne" in cmdline(pid))
    cluster = next(pid for pid in children(serve_pid) if "qcluster" in cmdline(pid))
    sandboxes = [pid for pid in descendants(daphne) if "sandbox" in cmdline(pid) or " -I " in cmdline(pid)]
    return {"daphne threads": status_field(daphne, "Threads"), "daphne fds": len(os.listdir(f"/proc/{daphne}/fd")),
            "sandbox workers": len(sandboxes), "daphne RSS MiB": round(status_field(daphne, "VmRSS") / 1024, 1),
            "cluster processes": 1 + len(descendants(cluster))}


# --- one round ---


class Round:
    def __init__(self, base: str, token: str, workflow: str, task: str, rng: random.Random):
        self.base, self.workflow, self.task, self.rng = base, workflow, task, rng
        self.headers = {"Authorization": f"Bearer {token}"}
        self.statuses: Counter[int] = Counter()
        self.sessions: list[tuple[str, str]] = []  # (session id, the message sent)
        self.runs: list[str] = []
        self.task_runs: list[str] = []
        self.hangups = 0

    async def chat(self, client: aiohttp.ClientSession, index: int) -> None:
        async with client.post(f"{self.base}/api/sessions", json={"name": f"fault {index}"}) as response:
            self.statuses[response.status] += 1
            session = (await response.json())["id"]
        message = f"message {index} {self.rng.random():.6f}"
        self.sessions.append((session, message))
        hang_after = self.rng.randint(1, 60) if self.rng.random() < 0.5 else None
        async with client.post(f"{self.base}/api/sessions/{session}/chat", json={"message": message}) as response:
            self.statuses[response.status] += 1
            events = 0
            async for line in response.content:
                if line.startswith(b"event:"):
                    events += 1
                    if hang_after is not None and events >= hang_after:
                        self.hangups += 1
                        response.close()  # the hang-up: the connection goes, mid-stream
                        return

    async def workflow_run(self, client: aiohttp.ClientSession, index: int) -> None:
        streamed = index % 2 == 0
        body = {"input": str(index), "stream": streamed}
        async with client.post(f"{self.base}/api/workflows/{self.workflow}/run", json=body) as response:
            self.statuses[response.status] += 1
            if not streamed:
                self.runs.append((await response.json())["id"])
                return
            hang = self.rng.random() < 0.5
            async for line in response.content:
                if line.startswith(b"data:") and b'"run_id"' in line:
                    self.runs.append(json.loads(line[5:])["run_id"])
                    if hang:
                        self.hangups += 1
                        response.close()
                        return

    async def scheduled(self, client: aiohttp.ClientSession) -> None:
        await asyncio.sleep(self.rng.random())
        async with client.post(f"{self.base}/api/scheduler/run/{self.task}") as response:
            self.statuses[response.status] += 1
            self.task_runs.append((await response.json())["id"])

    async def run(self, chats: int, workflows: int, scheduled: int) -> float:
        started = time.perf_counter()
        timeout = aiohttp.ClientTimeout(total=120)
        connector = aiohttp.TCPConnector(limit=chats + workflows + scheduled)
        async with aiohttp.ClientSession(headers=self.headers, timeout=timeout, connector=connector) as client:
            await asyncio.gather(*(self.chat(client, i) for i in range(chats)),
                                 *(self.workflow_run(client, i) for i in range(workflows)),
                                 *(self.scheduled(client) for _ in range(scheduled)))
        return time.perf_counter() - started

    async def settle(self, deadline_s: float = 60.0) -> list[str]:
        """Wait for the work to reach final states; the problems left after the deadline."""
        deadline = time.monotonic() + deadline_s
        async with aiohttp.ClientSession(headers=self.headers) as client:
            while True:
                problems = await self.problems(client)
                if not problems or time.monotonic() > deadline:
                    return problems
                await asyncio.sleep(0.5)

    async def problems(self, client: aiohttp.ClientSession) -> list[str]:
        problems = []
        for session, message in self.sessions:
            async with client.get(f"{self.base}/api/sessions/{session}/messages") as response:
                messages = (await response.json())["results"]
            users = [m for m in messages if m["role"] == "user"]
            if [m["content"] for m in users] != [message]:
                problems.append(f"session {session}: user message lost ({[m['content'] for m in users]})")
            for reply in (m for m in messages if m["role"] == "assistant"):
                if reply["status"] not in FINAL_REPLY:
                    problems.append(f"session {session}: reply {reply['status']}")
        for run in self.runs:
            async with client.get(f"{self.base}/api/workflows/runs/{run}") as response:
                found = await response.json()
            if found.get("status") not in FINAL_RUN:
                problems.append(f"workflow run {run}: {found.get('status')}")
        async with client.get(f"{self.base}/api/scheduler/history", params={"task": self.task, "limit": "1000"}) as r:
            history = {run["id"]: run["status"] for run in (await r.json())["results"]}
        for run in self.task_runs:
            if history.get(run) not in FINAL_RUN:
                problems.append(f"scheduled run {run}: {history.get(run)}")
        return problems


# --- setup and the report ---


def start_server(upstream: str):
    import requests

    from tests.server import LiveServer

    # One worker: the leak counts read one daphne process's threads and descriptors, and the figures stay
    # comparable with earlier runs (LiveServer otherwise runs serve's default workers).
    server = LiveServer(env={"AGENTSITE_LOGIN_RATE_LIMIT": "1000", "AGENTSITE_LOG_LEVEL": "WARNING"},
                        workers=1).start()
    token = server.login()["token"]
    headers = {"Authorization": f"Bearer {token}"}
    requests.patch(f"{server.base_url}/api/config", headers=headers, timeout=10, json={
        "provider": "openai", "base_url": upstream, "api_key": "sk-faults", "model": "fake-model"}).raise_for_status()
    workflow = requests.post(f"{server.base_url}/api/workflows", headers=headers, timeout=10, json={
        "name": "faults", "nodes": [
            {"id": "in", "name": "in", "type": "input", "config": {}},
            {"id": "double", "name": "double", "type": "code", "config": {"code": "return Number(input) * 2;"}},
            {"id": "even", "name": "even", "type": "condition",
             "config": {"condition": "Number(input) % 4 === 0", "trueBranch": "yes", "falseBranch": "no"}},
            {"id": "yes", "name": "yes", "type": "delay", "config": {"delayMs": 200}},
            {"id": "no", "name": "no", "type": "code", "config": {"code": "return 'odd ' + input;"}},
            {"id": "out", "name": "out", "type": "output", "config": {}}],
        "edges": [{"from": "in", "to": "double"}, {"from": "double", "to": "even"}, {"from": "even", "to": "yes"},
                  {"from": "even", "to": "no"}, {"from": "yes", "to": "out"}, {"from": "no", "to": "out"}]})
    workflow.raise_for_status()
    task = requests.post(f"{server.base_url}/api/scheduler/tasks", headers=headers, timeout=10, json={
        "name": "every minute", "cron": "* * * * *", "prompt": "What time is it?"})
    task.raise_for_status()
    return server, token, workflow.json()["id"], task.json()["id"]


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    return f"{os.cpu_count()} cores, {model}, Python {platform.python_version()}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--workflows", type=int, default=50)
    parser.add_argument("--scheduled", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=60)
    parser.add_argument("--delay-ms", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_upstream:
        serve_upstream(args.tokens, args.delay_ms)
        return 0

    print(f"{machine()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"{'PostgreSQL' if os.environ.get('DATABASE_URL') else 'SQLite'}"
          f"{' + Redis' if os.environ.get('REDIS_URL') else ''}")
    upstream_proc = subprocess.Popen([sys.executable, __file__, "--serve-upstream", "--tokens", str(args.tokens),
                                      "--delay-ms", str(args.delay_ms)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    upstream = upstream_proc.stdout.readline().strip()
    server = None
    failed: list[str] = []
    try:
        server, token, workflow, task = start_server(upstream)
        rng = random.Random(args.seed)
        # Warm-up: lazy imports, the sandbox pool, connections; then the baseline counts.
        warm = Round(server.base_url, token, workflow, task, rng)
        asyncio.run(warm.run(4, 4, 1))
        asyncio.run(warm.settle())
        time.sleep(1)
        rows = [("before", counts(server.proc.pid), None)]
        for number in range(1, args.rounds + 1):
            one = Round(server.base_url, token, workflow, task, rng)
            seconds = asyncio.run(one.run(args.chats, args.workflows, args.scheduled))
            problems = asyncio.run(one.settle())
            time.sleep(1)  # idle threads and connections given back
            five = sum(n for status, n in one.statuses.items() if status >= 500)
            rows.append((f"round {number}", counts(server.proc.pid),
                         f"{seconds:.1f} s, {sum(one.statuses.values())} requests, {one.hangups} hang-ups, "
                         f"5xx: {five}, unsettled: {len(problems)}"))
            if five:
                failed.append(f"round {number}: {five} responses were 5xx ({dict(one.statuses)})")
            failed.extend(f"round {number}: {problem}" for problem in problems[:20])
        names = list(rows[0][1])
        print(f"\n{'':<10}" + "".join(f"{name:>19}" for name in names))
        for label, values, note in rows:
            print(f"{label:<10}" + "".join(f"{values[name]:>19}" for name in names) + (f"   {note}" if note else ""))
        first, last = rows[1][1], rows[-1][1]
        # Pools fill during the first rounds (upstream connections, request threads' database connections): a
        # leak is a count that keeps growing, above every earlier round's.
        for name in ("daphne threads", "daphne fds", "sandbox workers", "cluster processes"):
            earlier = max(values[name] for _label, values, _note in rows[:-1])
            if len(rows) > 2 and last[name] > earlier + 2:
                failed.append(f"{name} kept growing: {[values[name] for _l, values, _n in rows]}")
        if last["daphne RSS MiB"] > first["daphne RSS MiB"] * 1.15:
            failed.append(f"daphne's memory grew from {first['daphne RSS MiB']} to {last['daphne RSS MiB']} MiB")
    finally:
        if server is not None:
            server.stop()
        upstream_proc.send_signal(signal.SIGTERM)
        upstream_proc.wait(10)
    print("\nverdict:", "OK" if not failed else "FAILED")
    for line in failed:
        print("  -", line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

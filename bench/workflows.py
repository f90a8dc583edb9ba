"""What workflows cost: the engine's own overhead per node, a sandbox evaluation round trip, and HTTP throughput.

    python bench/workflows.py                  # all three
    python bench/workflows.py --skip-http      # in-process figures only

1. Engine overhead per node: a 100-node chain of `delay 0` nodes (the engine alone), and of `code` nodes
   (engine plus a sandbox evaluation each), run in-process; the figure is the run's time over 100.
2. A JavaScript evaluation round trip to the sandbox pool (p50, p99).
3. HTTP throughput of a three-node workflow (input -> code -> output), synchronous runs at concurrency 8,
   against a real daphne server (SQLite); the load comes from a separate process, on the same 2 cores. Then
   the same workflow started by a sync webhook trigger (POST /hooks/<id>, Bearer secret; issue 31: at least
   the runs/s of the first).
Targets (issue 10): <= 1 ms per node of engine overhead, <= 1 ms p50 per sandbox evaluation, >= 220 runs/s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))]


def chain(kind: str, count: int) -> dict:
    nodes = [{"id": "n0", "type": "input", "name": "n0", "config": {}}]
    config = {"delayMs": 0} if kind == "delay" else {"code": "return input;"}
    nodes += [{"id": f"n{i}", "type": kind, "name": f"n{i}", "config": config} for i in range(1, count)]
    return {"nodes": nodes, "edges": [{"from": f"n{i}", "to": f"n{i + 1}"} for i in range(count - 1)]}


async def engine_per_node(kind: str, count: int = 100, runs: int = 30) -> tuple[float, float]:
    from workflows.engine import Execution
    from workflows.graph import Graph
    from workflows.nodes import RunContext

    graph = Graph.from_dict(chain(kind, count))
    timings = []
    for _ in range(runs + 3):
        ctx = RunContext(input="x", owner_id=None, emit=lambda kind, data: None)
        started = time.perf_counter()
        await Execution(graph, ctx).run()
        timings.append((time.perf_counter() - started) / count * 1000)
    timings = timings[3:]  # warm-up
    return percentile(timings, 50), percentile(timings, 99)


async def sandbox_round_trip(count: int = 2000) -> tuple[float, float]:
    from workflows.sandbox import sandbox_pool

    pool = sandbox_pool()
    for _ in range(20):
        await pool.run_code("return input + 1;", input=1, context={})
    timings = []
    for index in range(count):
        started = time.perf_counter()
        await pool.run_code("return {n: input * 2, s: context.input};", input=index, context={"input": "x"})
        timings.append((time.perf_counter() - started) * 1000)
    return percentile(timings, 50), percentile(timings, 99)


# The load generator: aiohttp, whose CPU per request is a fraction of httpx's (bench/compat.py), so that the
# client sharing the two cores with the server takes as little of them as it can.
LOAD = r"""
import asyncio, sys, time, aiohttp
base, token, target = sys.argv[1:4]
seconds, concurrency = float(sys.argv[4]), int(sys.argv[5])
# target: a workflow id (POST /api/workflows/:id/run with the token) or hook:<trigger id> (its secret as token)
url, body = ((f"{base}/hooks/{target[5:]}", 7) if target.startswith("hook:")
             else (f"{base}/api/workflows/{target}/run", {"input": "7"}))
async def run(client):
    async with client.post(url, json=body) as r:
        answer = await r.json()
        assert r.status == 200 and answer["status"] == "success", answer
async def worker(client, deadline, done):
    while time.perf_counter() < deadline:
        await run(client)
        done.append(1)
async def main():
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"},
                                     timeout=aiohttp.ClientTimeout(total=30)) as client:
        for _ in range(20):
            await run(client)
        done = []
        started = time.perf_counter()
        await asyncio.gather(*(worker(client, started + seconds, done) for _ in range(concurrency)))
        print(len(done) / (time.perf_counter() - started))
asyncio.run(main())
"""


def http_throughput(seconds: float, concurrency: int) -> list[tuple[str, float, float]]:
    """(door, runs per second, server CPU ms per run) for input -> code -> output over HTTP: through
    POST /api/workflows/:id/run, then through a sync webhook trigger (POST /hooks/<id>, Bearer secret)."""
    import requests

    from tests.server import LiveServer

    server = LiveServer(command="daphne", env={"AGENTSITE_LOGIN_RATE_LIMIT": "1000"}).start()
    try:
        token = server.login()["token"]
        headers = {"Authorization": f"Bearer {token}"}
        data = {"name": "bench", "nodes": [
            {"id": "in", "type": "input", "name": "in"},
            {"id": "double", "type": "code", "name": "double", "config": {"code": "return Number(input) * 2;"}},
            {"id": "out", "type": "output", "name": "out", "config": {"outputFormat": "json"}}],
            "edges": [{"from": "in", "to": "double"}, {"from": "double", "to": "out"}]}
        workflow = requests.post(f"{server.base_url}/api/workflows", json=data, headers=headers, timeout=30).json()
        trigger = requests.post(f"{server.base_url}/api/workflows/{workflow['id']}/triggers", headers=headers,
                                json={"mode": "sync", "rate_per_minute": 1_000_000}, timeout=30).json()
        figures = []
        for door, credential, target in (("POST /api/workflows/:id/run", token, workflow["id"]),
                                         ("POST /hooks/<id> (sync, Bearer)", trigger["secret"],
                                          f"hook:{trigger['id']}")):
            cpu_before = _cpu_seconds(server.proc.pid)
            load = subprocess.run([sys.executable, "-c", LOAD, server.base_url, credential, target, str(seconds),
                                   str(concurrency)], capture_output=True, text=True, check=True)
            rate = float(load.stdout.strip())
            cpu = (_cpu_seconds(server.proc.pid) - cpu_before) / max(1.0, rate * (seconds + 0.5)) * 1000
            figures.append((door, rate, cpu))
        return figures
    finally:
        server.stop()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    return f"{os.cpu_count()} cores, {model}, Python {platform.python_version()}"


async def in_process() -> None:
    for kind in ("delay", "code"):
        p50, p99 = await engine_per_node(kind)
        print(f"engine, 100-node chain of {kind} nodes: {p50:.3f} ms per node p50, {p99:.3f} ms p99")
    p50, p99 = await sandbox_round_trip()
    print(f"sandbox evaluation round trip: {p50:.3f} ms p50, {p99:.3f} ms p99")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-http", action="store_true")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    print(f"machine: {machine()}; {time.strftime('%Y-%m-%d')}")
    asyncio.run(in_process())
    if not args.skip_http:
        for door, rate, cpu in http_throughput(args.seconds, args.concurrency):
            print(f"HTTP input -> code -> output via {door}, concurrency {args.concurrency}: {rate:.0f} runs/s, "
                  f"server CPU {cpu:.2f} ms per run")


if __name__ == "__main__":
    main()

"""Sandbox fairness: how long one user's single code node takes while another user floods the sandbox.

    python bench/sandbox_fairness.py [--root CHECKOUT] [--floods 0,1,4] [--samples 5]

The flood (issue 23, item 3): user A's workflow of 8 parallel `while (true) {}` code nodes, each with
`retry: {max: 10}`, started `--floods` times at once. Meanwhile user B runs, one after another, a workflow
input -> code (`return input.length`) -> output, and each run's time is the figure. Everything runs
in-process through the workflow engine and this process's sandbox pool (no HTTP), with the settings of
`tests.settings` (2 workers, 1 s per evaluation) unless the environment says otherwise. A's runs are
cancelled once B's samples are taken, or with `--wait-flood` run to their own end (how each ended is
printed). `--root` imports another checkout's code (e.g. an export of the commit before the fairness work),
so before and after run the same script.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from pathlib import Path

PARALLEL = 8
RETRIES = 10


def flood_graph() -> dict:
    nodes = [{"id": "in", "type": "input", "name": "in", "config": {}}]
    nodes += [{"id": f"spin{i}", "type": "code", "name": f"spin{i}",
               "config": {"code": "while (true) {}", "retry": {"max": RETRIES}}} for i in range(PARALLEL)]
    return {"nodes": nodes, "edges": [{"from": "in", "to": f"spin{i}"} for i in range(PARALLEL)]}


def single_graph() -> dict:
    return {"nodes": [{"id": "in", "type": "input", "name": "in", "config": {}},
                      {"id": "count", "type": "code", "name": "count", "config": {"code": "return input.length"}},
                      {"id": "out", "type": "output", "name": "out", "config": {}}],
            "edges": [{"from": "in", "to": "count"}, {"from": "count", "to": "out"}]}


async def scenario(floods: int, samples: int, wait_flood: bool) -> dict:
    from workflows.engine import Execution
    from workflows.graph import Graph
    from workflows.nodes import RunContext

    flood, single = Graph.from_dict(flood_graph()), Graph.from_dict(single_graph())
    runs = [Execution(flood, RunContext(input="x", owner_id="user-a", emit=lambda kind, data: None))
            for _ in range(floods)]
    started_a = time.perf_counter()
    tasks = [asyncio.create_task(run.run()) for run in runs]
    await asyncio.sleep(0.3 if floods else 0)  # A's evaluations hold the workers before B starts
    timings, outcomes = [], []
    for _ in range(samples):
        execution = Execution(single, RunContext(input="hello", owner_id="user-b", emit=lambda kind, data: None))
        began = time.perf_counter()
        status = await execution.run()
        timings.append(time.perf_counter() - began)
        outcomes.append(status if status == "success" else f"{status}: {execution.error.message}")
    ended_a: list[str] = []

    def record(task: asyncio.Task, run: Execution) -> None:
        ended_a.append(f"{run.status} after {time.perf_counter() - started_a:.1f} s, "
                       f"{sum(entry.attempts for entry in run.trace)} attempts"
                       f"{': ' + run.error.message if run.error else ''}")

    for task, run in zip(tasks, runs, strict=True):
        task.add_done_callback(lambda task, run=run: record(task, run))
        if not wait_flood:
            task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"timings": timings, "outcomes": outcomes, "a_ended": ended_a}


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    return f"{os.cpu_count()} cores, {model}, Python {platform.python_version()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument("--floods", default="0,1,4")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--wait-flood", action="store_true", help="let A's runs end by themselves, and say how")
    args = parser.parse_args()
    sys.path.insert(0, args.root)
    os.chdir(args.root)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    from django.conf import settings

    print(f"machine: {machine()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; code from {args.root}")
    print("sandbox settings:", {name: getattr(settings, name) for name in dir(settings)
                                if name.startswith("AGENTSITE_SANDBOX_")})
    for floods in (int(value) for value in args.floods.split(",")):
        result = asyncio.run(scenario(floods, args.samples, args.wait_flood))
        timings = result["timings"]
        print(f"A's concurrent flood runs: {floods}; B's single code node run: p50 {statistics.median(timings):.3f} s, "
              f"max {max(timings):.3f} s (n={len(timings)}; {', '.join(f'{t:.2f}' for t in timings)} s)")
        print(f"    B's outcomes: {sorted(set(result['outcomes']))}")
        for ended in result["a_ended"]:
            print(f"    A's run: {ended}")


if __name__ == "__main__":
    main()

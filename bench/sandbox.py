"""JavaScript sandbox benchmark: evaluation round trips through the pool, a worker start, a compile check.

    .venv/bin/python bench/sandbox.py [--evaluations 2000] [--starts 10]

No Django. Measures, with real worker processes:

- run_code round trip (sync API, and async API from an event loop, which adds the hop to a pool thread):
  p50/p99 over N evaluations of a small `code` body, after 200 warm-up ones;
- run_condition round trip, and compile_problem round trip (p50/p99);
- a fresh worker start: spawn `python -I worker.py`, load V8, build and lock down a context, first answer;
- a context rebuild inside a worker (new V8 context + lockdown), which happens every `context_evaluations` runs.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from workflows.sandbox import SandboxPool  # noqa: E402
from workflows.sandbox.process import SandboxWorker  # noqa: E402

CODE = "const items = input.items; return {count: items.length, total: items.reduce((a, b) => a + b, 0)}"
CONDITION = "input.items.length > 2 && context.outputs.check === 'ok'"
INPUT = {"items": [1, 2, 3, 4, 5]}
CONTEXT = {"input": "hello", "outputs": {"check": "ok"}}
WARM_UP = 200


def percentiles(samples_ms: list[float]) -> str:
    ordered = sorted(samples_ms)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {statistics.median(ordered):.3f} ms  p99 {p99:.3f} ms  (n={len(ordered)})"


def timed(call: Callable[[], object], count: int) -> list[float]:
    for _ in range(WARM_UP):
        call()
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def timed_async(pool: SandboxPool, count: int) -> list[float]:
    for _ in range(WARM_UP):
        await pool.run_code(CODE, input=INPUT, context=CONTEXT)
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        await pool.run_code(CODE, input=INPUT, context=CONTEXT)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def worker_starts(pool: SandboxPool, count: int) -> list[float]:
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        worker = SandboxWorker.start(pool._worker_config(), timeout_s=30)
        samples.append((time.perf_counter() - started) * 1000)
        worker.kill()
    return samples


def context_rebuilds(count: int) -> list[float]:
    sys.path.insert(0, str(ROOT / "workflows" / "sandbox"))
    import worker  # the worker module itself, run in this process: V8 loads here only for this figure

    async def measure() -> list[float]:
        engine = worker.Engine(64, 1.0, 1000)
        engine.renew()
        samples = []
        for _ in range(count):
            started = time.perf_counter()
            engine.renew()
            samples.append((time.perf_counter() - started) * 1000)
        return samples

    return asyncio.run(measure())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evaluations", type=int, default=2000)
    parser.add_argument("--starts", type=int, default=10)
    arguments = parser.parse_args()
    pool = SandboxPool(size=1)
    try:
        assert pool.run_code_sync(CODE, input=INPUT, context=CONTEXT) == {"count": 5, "total": 15}
        n = arguments.evaluations
        print("run_code, sync:      ", percentiles(timed(lambda: pool.run_code_sync(CODE, INPUT, CONTEXT), n)))
        print("run_code, async:     ", percentiles(asyncio.run(timed_async(pool, n))))
        condition = timed(lambda: pool.run_condition_sync(CONDITION, INPUT, CONTEXT), n)
        print("run_condition, sync: ", percentiles(condition))
        print("compile_problem:     ", percentiles(timed(lambda: pool.compile_problem_sync(CODE), n)))
        print("worker start:        ", percentiles(worker_starts(pool, arguments.starts)))
    finally:
        pool.close()
    print("context rebuild:     ", percentiles(context_rebuilds(arguments.starts * 5)))


if __name__ == "__main__":
    main()

"""Two checkouts of agentsite side by side under `manage.py serve`: what a change does to /v1's added latency,
measured in one run (each request to the upstream directly, to the one and to the other, in a random order
each round, so all three see the same machine).

    git worktree add /tmp/before <commit>
    python bench/ab_serve.py --before /tmp/before [--after .] [--requests 300] [--pace-ms 20 --tokens 20]
    python bench/ab_serve.py --before . --before-env AGENTSITE_EVENT_LOOP=asyncio   # one checkout, two settings

Each checkout's own bench/compat.py starts its serve (a fresh data directory, SQLite, its task cluster and
timer, one worker) against one fake upstream (--tokens, --pace-ms), with --before-env / --after-env added to
its environment. Prints, per checkout, the p50 added over the upstream for the first token and the whole
100-chunk stream and for the non-streaming reply, and its serve's CPU per request (the whole process tree,
over the measured rounds: streamed and non-streaming requests alike). Two serves share the cores, so every
figure is larger than one serve alone would give: read the difference.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import random
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent


def bench_of(root: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, root / "bench" / "compat.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


async def measure(bench: ModuleType, targets: dict[str, str], requests: int, pids: dict[str, int],
                  ) -> tuple[dict[str, dict[str, list]], dict[str, float]]:
    """(each target's samples, each server's CPU seconds over the measured rounds: pids by target name)."""
    results: dict[str, dict[str, list]] = {name: {"stream": [], "plain": []} for name in targets}
    async with bench._client("bench", 8) as client:  # anonymous: compat_auth local, from loopback
        for _ in range(10):  # warm-up
            for url in targets.values():
                await bench.one_request(client, url, "fake-model", True)
        cpu = {name: bench.cpu_seconds(pid) for name, pid in pids.items()}
        for number in range(requests):
            order = list(targets)
            random.shuffle(order)
            for stream in (True, False):
                for name in order:
                    sample = await bench.one_request(client, targets[name], "fake-model", stream)
                    results[name]["stream" if stream else "plain"].append(sample)
            if (number + 1) % 100 == 0:
                print(f"  {number + 1}/{requests} rounds", flush=True)
        cpu = {name: bench.cpu_seconds(pid) - cpu[name] for name, pid in pids.items()}
    return results, cpu


def _env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SystemExit(f"an environment setting is NAME=VALUE (got {pair!r})")
        env[name] = value
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the other checkout (a git worktree)")
    parser.add_argument("--after", default=str(HERE.parent), help="this checkout (default)")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--pace-ms", type=float, default=0.0)
    parser.add_argument("--before-env", action="append", default=[], metavar="NAME=VALUE",
                        help="added to the first checkout's serve environment (repeatable)")
    parser.add_argument("--after-env", action="append", default=[], metavar="NAME=VALUE",
                        help="added to the second checkout's serve environment (repeatable)")
    args = parser.parse_args()
    envs = {"before": _env(args.before_env), "after": _env(args.after_env)}
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    trees = {"before": Path(args.before).resolve(), "after": Path(args.after).resolve()}
    benches = {name: bench_of(root, f"bench_{name}") for name, root in trees.items()}
    upstream_proc, upstream = benches["after"].start_upstream(args.tokens, args.pace_ms)
    servers = {}
    try:
        for name, bench in benches.items():
            # A checkout's own start_serve takes an environment since ab_serve does; none is passed to an older one.
            extra = {"env": envs[name]} if envs[name] else {}
            servers[name] = bench.start_serve(upstream, 1, **extra)[0]
        print(f"machine: {benches['after'].machine()}")
        print(f"upstream {upstream} ({args.tokens} tokens{f', paced {args.pace_ms:g} ms' if args.pace_ms else ''}); "
              + "; ".join(f"{name}: {trees[name]}{''.join(f' {k}={v}' for k, v in envs[name].items())} at "
                          f"{server.base_url}" for name, server in servers.items()))
        time.sleep(2.0)
        targets = {"direct": upstream, **{name: f"{server.base_url}/v1" for name, server in servers.items()}}
        results, cpu = asyncio.run(measure(benches["after"], targets, args.requests,
                                           {name: server.pid for name, server in servers.items()}))
    finally:
        for server in servers.values():
            server.stop()
        upstream_proc.terminate()
        upstream_proc.wait(10)

    def p50(samples: list, index: int) -> float:
        return statistics.median(sample[index] for sample in samples) * 1000

    direct = results.pop("direct")
    print(f"\np50 added over the upstream, {args.requests} rounds (ms)")
    print(f"{'checkout':<10}{'first token':>13}{'whole stream':>14}{'non-streaming':>15}{'CPU/request':>13}")
    for name, samples in results.items():
        print(f"{name:<10}{p50(samples['stream'], 0) - p50(direct['stream'], 0):>13.2f}"
              f"{p50(samples['stream'], 1) - p50(direct['stream'], 1):>14.2f}"
              f"{p50(samples['plain'], 1) - p50(direct['plain'], 1):>15.2f}"
              f"{cpu[name] * 1000 / (2 * args.requests):>13.2f}")


if __name__ == "__main__":
    main()

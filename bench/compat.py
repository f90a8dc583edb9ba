"""How much latency /v1/chat/completions adds over talking to the upstream directly, and its throughput.

    python bench/compat.py                      # starts a fake upstream and an agentsite server itself
    python bench/compat.py --target URL --upstream URL   # measure any gateway (LiteLLM, ...) the same way

--target is the OpenAI-compatible base URL to measure (ending in /v1); --upstream is the base URL of the
upstream that gateway forwards to (measured directly as the floor). Both must answer --model. Without
them, a fake OpenAI upstream streaming --tokens tokens starts on loopback, and an agentsite server
(daphne, SQLite) is started pointing at it. Prints time to first token and total time (p50/p99) for
streaming and non-streaming, direct and through the target, and requests per second at concurrency
1, 8 and 32 through the target.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


async def one_request(client: httpx.AsyncClient, base: str, model: str, stream: bool) -> tuple[float, float]:
    """(time to first token, total) in seconds for one chat completion."""
    body = {"model": model, "stream": stream, "messages": [{"role": "user", "content": "Count for me."}]}
    started = time.perf_counter()
    first = None
    if not stream:
        response = await client.post(f"{base}/chat/completions", json=body)
        response.raise_for_status()
        response.json()
        total = time.perf_counter() - started
        return total, total
    async with client.stream("POST", f"{base}/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if first is None and line.startswith("data: {") and '"content": "' in line.replace('":"', '": "') \
                    and '"content": ""' not in line.replace('":"', '": "'):
                first = time.perf_counter() - started
            if line == "data: [DONE]":
                break
    total = time.perf_counter() - started
    return (first if first is not None else total), total


async def latency(base: str, model: str, stream: bool, count: int) -> dict[str, float]:
    async with httpx.AsyncClient(timeout=60, headers={"Authorization": "Bearer bench"}) as client:
        for _ in range(5):  # warm-up: connections, caches, lazy imports
            await one_request(client, base, model, stream)
        samples = [await one_request(client, base, model, stream) for _ in range(count)]
    ttft = [s[0] * 1000 for s in samples]
    total = [s[1] * 1000 for s in samples]
    return {"ttft_p50": percentile(ttft, 50), "ttft_p99": percentile(ttft, 99),
            "total_p50": percentile(total, 50), "total_p99": percentile(total, 99)}


async def throughput(base: str, model: str, concurrency: int, seconds: float, stream: bool) -> float:
    done = 0
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=60, limits=limits, headers={"Authorization": "Bearer bench"}) as client:
        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                await one_request(client, base, model, stream)
                done += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return done / elapsed


def start_local(tokens: int):
    """A fake upstream streaming `tokens` tokens, and an agentsite server pointed at it."""
    import requests

    from tests.fakes.llm import FakeOpenAI, Text
    from tests.server import LiveServer

    words = [f"tok{i} " for i in range(tokens)]
    fake = FakeOpenAI(default_reply=Text("".join(words), pieces=words)).start()
    server = LiveServer(command="daphne", env={"AGENTSITE_LOGIN_RATE_LIMIT": "1000", "AGENTSITE_LOG_LEVEL": "WARNING"})
    server.start()
    headers = {"Authorization": f"Bearer {server.login()['token']}"}
    requests.patch(f"{server.base_url}/api/config", headers=headers, timeout=10, json={
        "provider": "openai", "base_url": fake.base_url, "api_key": "sk-bench", "model": "fake-model",
    }).raise_for_status()
    return fake, server


def print_table(title: str, rows: list[tuple[str, dict[str, float]]]) -> None:
    print(f"\n{title}")
    print(f"{'path':<22}{'TTFT p50':>10}{'TTFT p99':>10}{'total p50':>11}{'total p99':>11}   (ms)")
    for name, figures in rows:
        print(f"{name:<22}{figures['ttft_p50']:>10.2f}{figures['ttft_p99']:>10.2f}"
              f"{figures['total_p50']:>11.2f}{figures['total_p99']:>11.2f}")
    direct, via = rows[0][1], rows[1][1]
    print(f"{'added by the target':<22}{via['ttft_p50'] - direct['ttft_p50']:>10.2f}"
          f"{via['ttft_p99'] - direct['ttft_p99']:>10.2f}{via['total_p50'] - direct['total_p50']:>11.2f}"
          f"{via['total_p99'] - direct['total_p99']:>11.2f}")


async def run(args: argparse.Namespace) -> dict:
    results: dict = {"tokens": args.tokens, "requests": args.requests}
    for stream in (True, False):
        kind = "streaming" if stream else "non-streaming"
        direct = await latency(args.upstream, args.model, stream, args.requests)
        via = await latency(args.target, args.model, stream, args.requests)
        print_table(f"{kind}, {args.requests} sequential requests, {args.tokens} tokens each",
                    [("direct to upstream", direct), ("through target", via)])
        results[kind] = {"direct": direct, "target": via}
    print(f"\nthroughput through the target ({args.seconds:.0f} s per level, requests/s)")
    print(f"{'concurrency':<14}{'streaming':>12}{'non-streaming':>15}")
    results["rps"] = {}
    for concurrency in (1, 8, 32):
        streaming = await throughput(args.target, args.model, concurrency, args.seconds, True)
        plain = await throughput(args.target, args.model, concurrency, args.seconds, False)
        print(f"{concurrency:<14}{streaming:>12.1f}{plain:>15.1f}")
        results["rps"][concurrency] = {"streaming": streaming, "non_streaming": plain}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", help="OpenAI-compatible base URL to measure (…/v1)")
    parser.add_argument("--upstream", help="the upstream's base URL (…/v1), measured directly")
    parser.add_argument("--model", default="fake-model")
    parser.add_argument("--tokens", type=int, default=100, help="tokens the local fake upstream streams")
    parser.add_argument("--requests", type=int, default=200, help="sequential requests per latency figure")
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each throughput level")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args()
    if bool(args.target) != bool(args.upstream):
        parser.error("give both --target and --upstream, or neither")
    fake = server = None
    if not args.target:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
        fake, server = start_local(args.tokens)
        args.target, args.upstream = f"{server.base_url}/v1", fake.base_url
        print(f"started a fake upstream at {fake.base_url} and agentsite (daphne, SQLite) at {server.base_url}")
    print(f"machine: {os.cpu_count()} cores, Python {platform.python_version()}, {platform.platform()}")
    try:
        results = asyncio.run(run(args))
    finally:
        if server:
            server.stop()
        if fake:
            fake.stop()
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

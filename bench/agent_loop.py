"""The agent loop's own overhead, per streamed delta and per round, against the fake upstreams.

    python bench/agent_loop.py [--deltas 2000] [--rounds 8] [--repeat 7]

The fake upstream runs in a separate process (`python -m tests.fakes`), scripted over its control endpoint,
so its work does not share this process's GIL. Each figure is the median of --repeat runs and is compared
with a baseline that does only the HTTP part: the same request, the same reply, read line by line with
httpx and nothing else. What is left is ours: SSE parsing, validating chunks, building events, the loop.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")

import httpx  # noqa: E402

from agentsite.agent.config import AgentSettings  # noqa: E402
from agentsite.agent.loop import run_agent  # noqa: E402
from agentsite.agent.providers import get_provider  # noqa: E402
from agentsite.agent.tools import StaticToolSource, Tool, ToolResult, registry  # noqa: E402
from agentsite.agent.types import ChatRequest, Message, ModelSettings  # noqa: E402

PROMPT = [Message("user", "Count for me.")]


@dataclass
class Timing:
    wall: float  # seconds
    cpu: float  # seconds of this process's CPU: ours alone, as the fake upstream runs in another process


class RemoteFake:
    """A fake upstream in a child process, scripted over HTTP."""

    def __init__(self, kind: str):
        self.kind = kind
        self.process = subprocess.Popen([sys.executable, "-m", "tests.fakes", kind], cwd=ROOT, stdout=subprocess.PIPE,
                                        text=True)
        self.base_url = self.process.stdout.readline().strip()
        self.root = self.base_url.removesuffix("/v1")

    def script(self, replies: list[dict]) -> None:
        httpx.post(f"{self.root}/_fake/script", json=replies).raise_for_status()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def settings_for(fake: RemoteFake) -> AgentSettings:
    return AgentSettings(provider=fake.kind, base_url=fake.base_url, api_key="bench", model="bench", tools=("noop",),
                         system_prompt="", request_timeout=30)


async def raw_stream(fake: RemoteFake, client: httpx.AsyncClient, request: ChatRequest) -> int:
    """The baseline: POST the provider's own wire body and read the SSE lines, doing nothing with them."""
    provider = get_provider(settings_for(fake))
    url = f"{fake.base_url}/chat/completions" if fake.kind == "openai" else f"{fake.root}/v1/messages"
    headers = {"anthropic-version": "2023-06-01"}
    lines = 0
    async with client.stream("POST", url, json=provider.wire_request(request, stream=True), headers=headers) as reply:
        async for _line in reply.aiter_lines():
            lines += 1
    return lines


async def timed(repeat: int, prepare: Callable[[], None], run: Callable[[], Awaitable[object]]) -> Timing:
    """Medians of `run` after two warm-up runs, with `prepare` (scripting the fake) outside the timing."""
    wall, cpu = [], []
    for index in range(repeat + 2):
        prepare()
        start_wall, start_cpu = time.perf_counter(), time.process_time()
        await run()
        if index >= 2:
            wall.append(time.perf_counter() - start_wall)
            cpu.append(time.process_time() - start_cpu)
    return Timing(statistics.median(wall), statistics.median(cpu))


async def consume(events) -> int:
    count = 0
    async for _event in events:
        count += 1
    return count


async def bench_deltas(fake: RemoteFake, client: httpx.AsyncClient, deltas: int, repeat: int) -> dict[str, Timing]:
    pieces = [f"w{i} " for i in range(deltas)]
    reply = [{"kind": "text", "text": "".join(pieces), "pieces": pieces}]
    settings = settings_for(fake)
    request = ChatRequest(PROMPT, settings=ModelSettings(model="bench"))
    raw = await timed(repeat, lambda: fake.script(reply), lambda: raw_stream(fake, client, request))
    provider = await timed(repeat, lambda: fake.script(reply),
                           lambda: consume(get_provider(settings).stream(request)))
    loop = await timed(repeat, lambda: fake.script(reply),
                       lambda: consume(run_agent(messages=PROMPT, user_id=None, settings=settings, use_tools=False)))
    return {"raw": raw, "provider": provider, "loop": loop}


async def noop(arguments: dict, ctx: object) -> ToolResult:
    return ToolResult.of_text("ok")


async def bench_rounds(fake: RemoteFake, client: httpx.AsyncClient, rounds: int, repeat: int) -> dict[str, Timing]:
    call = {"kind": "tool_calls", "calls": [{"name": "noop", "arguments": {"n": 1}}], "text": "Working on it."}
    replies = [call] * rounds + [{"kind": "text", "text": "Done now, all counted."}]
    settings = settings_for(fake)
    request = ChatRequest(PROMPT, settings=ModelSettings(model="bench"))

    async def raw_rounds() -> None:
        for _ in range(rounds + 1):
            await raw_stream(fake, client, request)

    raw = await timed(repeat, lambda: fake.script(replies), raw_rounds)
    loop = await timed(repeat, lambda: fake.script(replies),
                       lambda: consume(run_agent(messages=PROMPT, user_id=None, settings=settings,
                                                 max_rounds=rounds)))
    return {"raw": raw, "loop": loop}


async def bench_offline(repeat: int) -> tuple[Timing, int]:
    settings = AgentSettings(system_prompt="", max_tokens=100_000)
    text = "word " * 6000
    events = [0]

    async def run() -> None:
        events[0] = await consume(run_agent(messages=[Message("user", text)], user_id=None, settings=settings,
                                            use_tools=False))

    return await timed(repeat, lambda: None, run), events[0] - 1  # all but the done event are deltas


def report_deltas(kind: str, deltas: int, figures: dict[str, Timing]) -> None:
    raw, provider, loop = figures["raw"], figures["provider"], figures["loop"]
    print(f"{kind}: one reply of {deltas} streamed deltas")
    for label, unit in (("wall ms", "wall"), ("CPU ms ", "cpu")):
        print(f"  {label}   raw HTTP {getattr(raw, unit) * 1e3:6.1f}  provider {getattr(provider, unit) * 1e3:6.1f}  "
              f"loop {getattr(loop, unit) * 1e3:6.1f}")
    per = {name: timing.cpu / deltas * 1e6 for name, timing in figures.items()}
    print(f"  CPU per delta: HTTP alone {per['raw']:.1f} µs; the provider adds {per['provider'] - per['raw']:.1f} µs, "
          f"the loop {per['loop'] - per['provider']:.1f} µs more: overhead {per['loop'] - per['raw']:.1f} µs per delta")


def report_rounds(kind: str, rounds: int, figures: dict[str, Timing]) -> None:
    raw, loop = figures["raw"], figures["loop"]
    calls = rounds + 1
    print(f"{kind}: {rounds} tool rounds + the final answer ({calls} upstream calls, a no-op tool)")
    print(f"  wall ms   raw HTTP {raw.wall * 1e3:6.1f}  loop {loop.wall * 1e3:6.1f}")
    print(f"  CPU ms    raw HTTP {raw.cpu * 1e3:6.1f}  loop {loop.cpu * 1e3:6.1f}")
    print(f"  overhead per round: {(loop.cpu - raw.cpu) / calls * 1e3:.2f} ms CPU, "
          f"{(loop.wall - raw.wall) / calls * 1e3:.2f} ms wall")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deltas", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    registry.register_source(StaticToolSource("bench", [Tool("noop", "Does nothing.", {"type": "object"}, noop)]))
    print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs, median of {args.repeat} runs\n")
    for kind in ("openai", "anthropic"):
        fake = RemoteFake(kind)
        try:
            # One pooled client for the baseline, as the providers keep one per event loop.
            async with httpx.AsyncClient(timeout=30) as client:
                report_deltas(kind, args.deltas, await bench_deltas(fake, client, args.deltas, args.repeat))
                report_rounds(kind, args.rounds, await bench_rounds(fake, client, args.rounds, args.repeat))
        finally:
            fake.stop()
        print()
    offline, deltas = await bench_offline(args.repeat)
    print(f"offline: {deltas} deltas through the loop, no network: {offline.wall * 1e3:.1f} ms wall, "
          f"{offline.cpu * 1e3:.1f} ms CPU ({offline.cpu / deltas * 1e6:.1f} µs per delta)")


if __name__ == "__main__":
    asyncio.run(main())

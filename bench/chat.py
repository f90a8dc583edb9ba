"""What the chat stream (`POST /api/sessions/:id/chat`, the dashboard's door) adds over the upstream, beside what
`/v1/chat/completions` adds, in one run under `manage.py serve` (issue 30, item 5).

    python bench/chat.py [--turns 200] [--session-turns 10] [--tokens 100] [--pace-ms 0] [--workers 1]

A fake OpenAI upstream (bench/compat.py's, a process of its own, --tokens tokens a reply) and `manage.py serve`
as the README starts it (fresh data directory, SQLite, task cluster and timer running, configured through
PATCH /api/config; the offline knowledge base empty). Then, one by one in rotating order: a request straight
to the upstream (the floor), a streamed `/v1/chat/completions` (anonymous from loopback) and a chat turn on a
session of the admin (a dashboard token); a new session every --session-turns turns, so the history sent
upstream grows from 0 to session-turns - 1 earlier turns. For each: time to the first token (the first
non-empty content delta) and to the whole reply (`data: [DONE]`, the chat's `done` event), p50 and p90, and
what each door adds over the upstream's p50. The server's CPU (its whole process tree) per request of each
door over alternating blocks of 20.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compat import (  # noqa: E402
    _client,
    _timed,
    cpu_seconds,
    machine,
    one_request,
    percentile,
    start_serve,
    start_upstream,
)

# The chat stream's first token and an error event, found in each network read (bench/compat.py's reader: the
# client's cost per read, as for the /v1 rows beside it).
CHAT_TOKEN = re.compile(rb'event: delta\ndata: \{"content": ?"[^"]')
CHAT_ERROR = re.compile(rb"(^|\n)event: error\n")


async def chat_turn(client: aiohttp.ClientSession, base: str, session_id: str) -> tuple[float, float]:
    """(time to first token, total) in seconds for one chat turn on the session, to the end of its body."""
    return await _timed(client, f"{base}/api/sessions/{session_id}/chat", {"message": "Count for me."}, CHAT_TOKEN,
                        stream=True, error=CHAT_ERROR)


class Sessions:
    """Chat sessions of the admin, a new one every `turns` turns."""

    def __init__(self, client: aiohttp.ClientSession, base: str, turns: int):
        self.client, self.base, self.turns, self.used, self.current = client, base, turns, 0, ""

    async def next(self) -> str:
        if not self.current or self.used >= self.turns:
            async with self.client.post(f"{self.base}/api/sessions", json={"name": "bench"}) as response:
                response.raise_for_status()
                self.current, self.used = (await response.json())["id"], 0
        self.used += 1
        return self.current


def _row(samples: list[tuple[float, float]]) -> dict[str, float]:
    ttft, total = [s[0] * 1000 for s in samples], [s[1] * 1000 for s in samples]
    return {"ttft_p50": percentile(ttft, 50), "ttft_p90": percentile(ttft, 90),
            "total_p50": percentile(total, 50), "total_p90": percentile(total, 90)}


async def measure(args: argparse.Namespace, server, token: str) -> dict:
    base, v1 = server.base_url, f"{server.base_url}/v1"
    async with _client(token, 4) as dashboard, _client("bench", 4) as anonymous:
        sessions = Sessions(dashboard, base, args.session_turns)
        doors = {
            "direct": lambda: one_request(anonymous, args.upstream, "fake-model", True),
            "/v1/chat/completions": lambda: one_request(anonymous, v1, "fake-model", True),
            "chat stream": lambda: _turn(dashboard, base, sessions),
        }
        for _ in range(5):  # warm-up: connections, caches, lazy imports
            for call in doors.values():
                await call()
        samples: dict[str, list] = {name: [] for name in doors}
        names = list(doors)
        for index in range(args.turns):
            for name in names[index % 3:] + names[:index % 3]:
                samples[name].append(await doors[name]())
        cpu = {"/v1/chat/completions": 0.0, "chat stream": 0.0}
        blocks = max(1, args.turns // 20)
        for block in range(blocks):
            for name in list(cpu) if block % 2 else list(cpu)[::-1]:
                before = cpu_seconds(server.pid)
                for _ in range(20):
                    await doors[name]()
                cpu[name] += cpu_seconds(server.pid) - before
    figures = {name: _row(rows) for name, rows in samples.items()}
    for name, value in cpu.items():
        figures[name]["server_cpu_ms"] = value * 1000 / (blocks * 20)
    return figures


async def _turn(client: aiohttp.ClientSession, base: str, sessions: Sessions) -> tuple[float, float]:
    return await chat_turn(client, base, await sessions.next())


def report(figures: dict, args: argparse.Namespace) -> None:
    direct = figures["direct"]
    print(f"\nstreamed replies of {args.tokens} tokens{f' paced {args.pace_ms:g} ms' if args.pace_ms else ''}, "
          f"{args.turns} each, rotating order; sessions of up to {args.session_turns} turns (ms)")
    print(f"{'path':<22}{'TTFT p50':>10}{'TTFT p90':>10}{'total p50':>11}{'total p90':>11}"
          f"{'+TTFT p50':>11}{'+total p50':>12}{'CPU/req':>9}")
    for name, row in figures.items():
        added = "" if name == "direct" else (f"{row['ttft_p50'] - direct['ttft_p50']:>11.2f}"
                                             f"{row['total_p50'] - direct['total_p50']:>12.2f}")
        cpu = f"{row['server_cpu_ms']:>9.2f}" if "server_cpu_ms" in row else ""
        print(f"{name:<22}{row['ttft_p50']:>10.2f}{row['ttft_p90']:>10.2f}{row['total_p50']:>11.2f}"
              f"{row['total_p90']:>11.2f}{added or ' ' * 23}{cpu}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=200, help="requests of each kind")
    parser.add_argument("--session-turns", type=int, default=10, help="turns per session before a new one")
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--pace-ms", type=float, default=0.0)
    parser.add_argument("--workers", type=int, default=1, help="serve's --workers")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    upstream, args.upstream = start_upstream(args.tokens, args.pace_ms)
    server = None
    try:
        print(f"machine: {machine()}")
        server, token = start_serve(args.upstream, args.workers)
        print(f"manage.py serve --workers {args.workers} (pid {server.pid}) at {server.base_url}, data dir "
              f"{server.data_dir}; upstream {args.upstream} (pid {upstream.pid})")
        figures = asyncio.run(measure(args, server, token))
    finally:
        if server:
            server.stop()
        upstream.terminate()
        upstream.wait(10)
    report(figures, args)
    if args.json:
        print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()

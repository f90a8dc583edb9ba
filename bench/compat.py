"""How much latency /v1/chat/completions adds over talking to the upstream directly, its server CPU per
request, its memory, and its throughput.

    python bench/compat.py                      # starts a fake upstream and an agentsite server itself
    python bench/compat.py --target URL --upstream URL [--server-pid PID]   # any gateway (LiteLLM, ...)
    python bench/compat.py --serve-upstream     # only the fake upstream, in the foreground (prints its URL)
    python bench/compat.py --upstream URL       # agentsite, started here, against that upstream
    python bench/compat.py --model smart        # also: the alias `smart` (made here, one target: the direct
                                                # entry default/fake-model) against that entry, interleaved

--target is the OpenAI-compatible base URL to measure (ending in /v1); --upstream is the base URL of the
upstream that gateway forwards to (measured directly as the floor). Both must answer --model. Without
them, a fake OpenAI upstream streaming --tokens tokens starts in a process of its own (so it shares no
GIL with this client or the server; --upstream alone names one already running, so that several gateways
are measured against the same one), and an agentsite server (daphne, SQLite) is started pointing at it;
the API key is then a dashboard token of the server's admin (the authenticated path) unless --api-key
gives another (any string not a token or an `ask-` key is an anonymous caller, served from loopback under
compat_auth local, the default).

    python bench/compat.py --api-key            # the local server's admin makes an API key (ask-...) first
    python bench/compat.py --api responses      # /v1/responses side by side with /v1/chat/completions

--api-key without a value makes an API key (issue 27) on the local server, measures what key authentication
adds over the dashboard token (requests with the token and with the key alternating one by one through the
same server, non-streaming and streaming; the server's CPU per request over alternating blocks of each),
then runs everything below with the key.

    python bench/compat.py --api messages       # /v1/messages side by side with /v1/chat/completions
    python bench/compat.py --agent [--rounds 5] # agent:<slug> vs the plain model and `agent` (issue 45 item 8)
    python bench/compat.py --serve [--workers 1,2] [--api-key] [--pace-ms 20]   # under `manage.py serve`

--serve starts agentsite as the README's first command leaves it (`manage.py serve`: a fresh data directory,
SQLite, the task cluster and the scheduler's timer running, default settings), configured through PATCH
/api/config by its admin, anonymous (compat_auth local, from loopback) or, with --api-key, with a key made
through POST /api/keys. The server CPU is summed over serve's whole process tree, and printed per process
kind (serve itself, daphne, the cluster's processes) idle (--idle-seconds) and over the run. Throughput is
measured at --concurrency 32,128; --workers 1,2 runs everything for each worker count, serve started afresh
each time, and ends with one throughput table. --only latency|throughput runs half.

    python bench/compat.py --serve --workers 1,2 --only throughput --light --pace-ms 5   # issue 30's item 4

--light measures throughput with bench/loadgen.py's client and (with --only throughput) its upstream, which
cost a fraction of the default harness's CPU: on 2 cores that harness left a second worker no core to run on.

    python bench/compat.py --floor [--metrics] [--pace-ms 10] [--requests 30]   # issue 51: beside the relays

--floor measures agentsite against the least a server can do, in one run, every kind interleaved one request at
a time: one paced upstream (--tokens, --pace-ms; give a pace, 10 ms for issue 51's figures), bench/relay.py (the
aiohttp relay), bench/relay_daphne.py (the same relay as a bare ASGI app under agentsite's own daphne worker:
uvloop, Twisted's asyncio reactor) and `manage.py serve --workers 1` (with --metrics a second serve with
AGENTSITE_METRICS=1), its admin making an API key (scopes v1 and api). Kinds: the upstream directly, each relay's
/v1/chat/completions, and on each serve /v1/chat/completions anonymous and with the key and a chat turn
(POST /api/sessions/:id/chat on a fresh session named `bench`) with the dashboard token and with the key;
streamed, then non-streamed (/v1 only). Around each request it reads the serving process (the relay, serve's
daphne worker) from /proc: CPU of all threads (schedstat), the event loop thread's voluntary context switches
(its wake-ups) and the other threads' (thread crossings: work handed to a thread, a background thread's
timer). It prints per kind the first token and non-streaming reply added over the upstream (p50 − p50), CPU,
wake-ups and crossings per streamed event (per request ÷ --tokens) and CPU per non-streaming request, then
each agentsite kind against issue 51's goals (CPU per event ≤ 1.2× the daphne relay's, first token ≤ its + 1 ms,
whole reply ≤ its + 0.7 ms; metrics on ≤ off + 5%).

--agent makes the agent `bench` on the local server (its admin's: the same model as --model, no tools, no
knowledge) and sends, one by one in rotating order through /v1/chat/completions, the plain model (--model),
`agent` (the deployment's agent `default`, made the same as `bench` through /api/config: the same agent loop,
the same settings, another name) and `agent:bench`, non-streaming and
streaming, for --rounds rounds of --requests each; it prints each round's p50s and what `agent:bench` adds over
each (the median over the rounds), then times resolving `agent:bench` in process (the directory's cached path,
agentsite.agent.agents.aresolve, against the server's own database) and stops. With --target, --agent <slug>
names an agent that exists there.

--api messages measures the Anthropic Messages door against the chat completions door on the same server,
model and upstream: requests to each alternating one by one (latency), then in alternating blocks of 20 (the
server's CPU per request for each), non-streaming and streaming; then it stops.

Direct and through-target requests alternate one by one (in alternating order), so both see the same
machine state. Prints time to first token and total time (p50/p99) for streaming and non-streaming, the
server's CPU time per request over each phase (schedstat from /proc: every thread of the server process and its
children: agentsite's daphne, or --server-pid on this machine), requests per second at concurrency 1, 8
and 32 through the target, and the server's resident memory (VmRSS) at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
NEW_KEY = "<new>"  # --api-key without a value


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


# --- the server process, read from /proc ---


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def process_tree(pid: int) -> list[int]:
    """pid and its live descendants (a gateway may serve from worker processes)."""
    tree, queue = [], [pid]
    while queue:
        current = queue.pop()
        tree.append(current)
        queue += _children(current)
    return tree


def cpu_seconds(pid: int | None) -> float:
    """CPU seconds of pid and its descendants, all their threads (_cpu_of; 0 without a pid)."""
    if pid is None:
        return 0.0
    return sum(_cpu_of(member) for member in process_tree(pid))


def _cpu_of(pid: int) -> float:
    """The CPU seconds pid's live threads have run, to the nanosecond (schedstat's first field: the scheduler's
    own account). utime and stime count in 10 ms ticks, too coarse for an idle process's few ms a second; they
    are the fallback where schedstat is missing (they also count threads that have exited)."""
    try:
        return sum(int((task / "schedstat").read_text().split()[0]) for task in Path(f"/proc/{pid}/task").iterdir()
                   ) / 1e9
    except (OSError, ValueError, IndexError):
        pass
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime: fields 14 and 15 of stat(5)


def rss_mib(pid: int | None) -> float | None:
    """VmRSS of pid and its descendants, in MiB."""
    if pid is None:
        return None
    total_kib = 0
    for member in process_tree(pid):
        try:
            status = Path(f"/proc/{member}/status").read_text()
        except OSError:
            continue
        total_kib += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return total_kib / 1024


# --- requests ---


# A streamed reply is read as the network delivers it, and searched for the first token in the bytes of each
# read: the client's cost is then per read, not per line, the same for every dialect. (Read line by line, a
# dialect with more lines per event, Responses' and Messages' `event:` lines, costs this client ~3 us more per
# event, which showed as that door's "added" latency though no server sent a byte later.) A reply is whole
# when its body has ended, where the official SDKs stop reading too.
CHAT_TOKEN = re.compile(rb'"content": ?"[^"]')  # non-empty content (not the role chunk's "")
RESPONSES_TOKEN = re.compile(rb'"type": ?"response\.output_text\.delta"')
MESSAGES_TOKEN = re.compile(rb'"type": ?"text_delta"')


async def _timed(client: aiohttp.ClientSession, url: str, body: dict, first_token: re.Pattern[bytes], *,
                 stream: bool | None = None, error: re.Pattern[bytes] | None = None) -> tuple[float, float]:
    """(time to first token, total) in seconds for one POST; unless the reply streams (`stream`, by default the
    body's), both are the time to the whole JSON reply, parsed. A streamed reply in which `error` is found
    raises."""
    started = time.perf_counter()
    async with client.post(url, json=body) as response:
        response.raise_for_status()
        if not (body.get("stream") if stream is None else stream):
            await response.json()
            total = time.perf_counter() - started
            return total, total
        first = None
        tail = b""
        async for chunk in response.content.iter_any():
            window = tail + chunk  # a token split between two reads is still found
            if first is None and first_token.search(window):
                first = time.perf_counter() - started
            if error is not None and error.search(window):
                raise RuntimeError(f"the stream reported an error: {window[-300:]!r}")
            tail = window[-128:]
    total = time.perf_counter() - started
    return (first if first is not None else total), total


async def one_request(client: aiohttp.ClientSession, base: str, model: str, stream: bool) -> tuple[float, float]:
    """(time to first token, total) in seconds for one chat completion."""
    body = {"model": model, "stream": stream, "messages": [{"role": "user", "content": "Count for me."}]}
    return await _timed(client, f"{base}/chat/completions", body, CHAT_TOKEN)


async def responses_request(client: aiohttp.ClientSession, base: str, model: str, stream: bool
                            ) -> tuple[float, float]:
    """(time to first token, total) in seconds for one POST /v1/responses (store false: the same work as a chat
    completion, nothing written)."""
    body = {"model": model, "stream": stream, "input": "Count for me.", "store": False}
    return await _timed(client, f"{base}/responses", body, RESPONSES_TOKEN)


# --api: the other doors, each measured side by side with /v1/chat/completions through the same server.
async def one_message(client: aiohttp.ClientSession, base: str, model: str, stream: bool) -> tuple[float, float]:
    """(time to first token, total) in seconds for one POST /v1/messages (base ends in /v1)."""
    body = {"model": model, "max_tokens": 1024, "stream": stream,
            "messages": [{"role": "user", "content": "Count for me."}]}
    return await _timed(client, f"{base}/messages", body, MESSAGES_TOKEN)


DOORS = {"responses": responses_request, "messages": one_message}


async def door_vs_chat(args: argparse.Namespace, stream: bool) -> dict:
    """The door (--api) and /v1/chat/completions through the target, with the upstream directly as the floor,
    one by one in rotating order; then the server's CPU per request of each over alternating blocks of 20."""
    door = DOORS[args.api]
    kinds = {"direct": (one_request, args.upstream, args.upstream_model),
             "chat/completions": (one_request, args.target, args.model), args.api: (door, args.target, args.model)}
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in kinds}
    async with _client(args.api_key, 4) as client:
        for _ in range(5):
            for call, base, model in kinds.values():
                await call(client, base, model, stream)
        names = list(kinds)
        for index in range(args.requests):
            for name in names[index % 3:] + names[:index % 3]:
                call, base, model = kinds[name]
                samples[name].append(await call(client, base, model, stream))
        cpu = {"chat/completions": 0.0, args.api: 0.0}
        for _block in range(max(1, args.requests // 20)):
            for name in cpu:
                call, base, model = kinds[name]
                before = cpu_seconds(args.server_pid)
                for _ in range(20):
                    await call(client, base, model, stream)
                cpu[name] += cpu_seconds(args.server_pid) - before
    blocks = max(1, args.requests // 20) * 20
    return {"figures": {name: _figures(rows) for name, rows in samples.items()},
            "server_cpu_ms": {name: value * 1000 / blocks for name, value in cpu.items()}
            if args.server_pid else None}


def print_doors(title: str, result: dict) -> None:
    print(f"\n{title}")
    print(f"{'path':<22}{'TTFT p50':>10}{'TTFT p99':>10}{'total p50':>11}{'total p99':>11}{'CPU/req':>9}   (ms)")
    cpu = result["server_cpu_ms"] or {}
    for name, row in result["figures"].items():
        print(f"{name:<22}{row['ttft_p50']:>10.2f}{row['ttft_p99']:>10.2f}{row['total_p50']:>11.2f}"
              f"{row['total_p99']:>11.2f}{_ms(cpu.get(name)):>9}")


def _client(api_key: str, connections: int) -> aiohttp.ClientSession:
    """The load generator's client: aiohttp, whose CPU per request is ~15x lower than httpx's at concurrency 32
    (with httpx this client, not the server, capped the throughput it measured)."""
    return aiohttp.ClientSession(headers={"Authorization": f"Bearer {api_key}"},  # the key the same way as a token
                                 timeout=aiohttp.ClientTimeout(total=60),
                                 connector=aiohttp.TCPConnector(limit=connections))


def _figures(samples: list[tuple[float, float]]) -> dict[str, float]:
    ttft = [s[0] * 1000 for s in samples]
    total = [s[1] * 1000 for s in samples]
    return {"ttft_p50": percentile(ttft, 50), "ttft_p99": percentile(ttft, 99),
            "total_p50": percentile(total, 50), "total_p99": percentile(total, 99)}


async def latency(args: argparse.Namespace, stream: bool) -> dict:
    """Direct and through-target requests alternating, with the server's CPU per target request."""
    async with _client(args.api_key, 4) as client:
        for _ in range(5):  # warm-up: connections, caches, lazy imports
            await one_request(client, args.upstream, args.upstream_model, stream)
            await one_request(client, args.target, args.model, stream)
        direct, via = [], []
        cpu_before = cpu_seconds(args.server_pid)
        for index in range(args.requests):
            order = ((args.upstream, direct, args.upstream_model), (args.target, via, args.model))
            for base, samples, model in order if index % 2 else reversed(order):
                samples.append(await one_request(client, base, model, stream))
        cpu = cpu_seconds(args.server_pid) - cpu_before
    return {"direct": _figures(direct), "target": _figures(via),
            "server_cpu_ms": cpu * 1000 / args.requests if args.server_pid else None}


async def alias_vs_entry(args: argparse.Namespace, stream: bool) -> dict:
    """Through the target both ways, alternating: the alias (--model) and the catalogue entry it routes to
    (--entry). The difference of the p50s is what routing through an alias adds."""
    async with _client(args.api_key, 4) as client:
        for _ in range(10):
            await one_request(client, args.target, args.model, stream)
            await one_request(client, args.target, args.entry, stream)
        alias, entry = [], []
        for index in range(args.requests):
            order = ((args.model, alias), (args.entry, entry))
            for model, samples in order if index % 2 else reversed(order):
                samples.append(await one_request(client, args.target, model, stream))
    return {"alias": _figures(alias), "entry": _figures(entry)}


def resolve_cost_us(rounds: int = 20000) -> dict[str, float]:
    """In-process: resolving and ordering an alias and an entry (what the router adds per request), µs each."""
    from agentsite.agent.routing import Alias, AliasTarget, Catalogue, Connection, Router

    catalogue = Catalogue([Connection("default", "openai", "http://127.0.0.1:9/v1", models=("fake-model",))],
                          [Alias("smart", "fallback", (AliasTarget("default/fake-model"),))],
                          default_connection="default")
    router = Router(cooldown_s=30)
    figures = {}
    for name in ("smart", "default/fake-model"):
        samples = []
        for _ in range(rounds):
            started = time.perf_counter()
            router.order(catalogue.resolve(name))
            samples.append((time.perf_counter() - started) * 1e6)
        figures[name] = percentile(samples, 50)
    return figures


AGENT_SLUG = "bench"


async def agent_vs_model(args: argparse.Namespace, stream: bool) -> list[dict]:
    """--agent: through the target, one by one in rotating order, the plain model, `agent` and `agent:<slug>`;
    one {name: figures} per round (--rounds), each of --requests requests per name."""
    names = {"model": args.model, "agent": "agent", "agent:slug": f"agent:{args.agent}"}
    rounds = []
    async with _client(args.api_key, 4) as client:
        for _ in range(10):  # warm-up: connections, the directory's load, lazy imports
            for model in names.values():
                await one_request(client, args.target, model, stream)
        order = list(names)
        for _round in range(args.rounds):
            samples: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
            for index in range(args.requests):
                for name in order[index % 3:] + order[:index % 3]:
                    samples[name].append(await one_request(client, args.target, names[name], stream))
            figures: dict = {name: _figures(rows) for name, rows in samples.items()}
            # Paired: request i of agent:<slug> against request i of each other name, sent next to it (the same
            # moment of the machine); the median of those differences is steadier than a difference of p50s.
            for other in ("model", "agent"):
                for index_, field in ((0, "ttft"), (1, "total")):
                    figures[f"paired_{field}_over_{other}"] = percentile(
                        [(mine[index_] - theirs[index_]) * 1000
                         for mine, theirs in zip(samples["agent:slug"], samples[other], strict=True)], 50)
            rounds.append(figures)
    return rounds


def print_agent_rounds(title: str, rounds: list[dict], stream: bool) -> dict[str, float]:
    """Each round's p50s, and what agent:<slug> adds over the plain model and over `agent`: the difference of the
    round's p50s, and the median of the paired differences; then the median of each over the rounds (ms), which
    it returns."""
    field = "ttft" if stream else "total"
    print(f"\n{title}")
    print(f"{'round':<7}{'model':>9}{'agent':>9}{'agent:slug':>12}{'slug-model':>12}{'slug-agent':>12}"
          f"{'paired s-m':>12}{'paired s-a':>12}   ({'TTFT' if stream else 'total'} p50, ms)")
    columns: dict[str, list[float]] = {"over_model": [], "over_agent": [], "paired_over_model": [],
                                       "paired_over_agent": []}
    for index, figures in enumerate(rounds, 1):
        model, agent, slug = (figures[name][f"{field}_p50"] for name in ("model", "agent", "agent:slug"))
        row = {"over_model": slug - model, "over_agent": slug - agent,
               "paired_over_model": figures[f"paired_{field}_over_model"],
               "paired_over_agent": figures[f"paired_{field}_over_agent"]}
        for name, value in row.items():
            columns[name].append(value)
        print(f"{index:<7}{model:>9.3f}{agent:>9.3f}{slug:>12.3f}"
              + "".join(f"{value:>+12.3f}" for value in row.values()))
    medians = {name: percentile(values, 50) for name, values in columns.items()}
    print(f"{'median':<37}" + "".join(f"{value:>+12.3f}" for value in medians.values()))
    return medians


def agent_resolve_cost_us(data_dir: Path, username: str, slug: str, rounds: int = 20000) -> dict[str, float]:
    """In process, against the server's database (SQLite): resolving `agent:<slug>` for `username` as a /v1
    request does (agentsite.agent.agents.aresolve: the directory's cached rules, no query while the
    invalidation channel is connected), and telling a plain model is no agent; p50 in µs, and the queries the
    cached path made."""
    os.environ["AGENTSITE_DATA_DIR"] = str(data_dir)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from agentsite.agent import agents
    from agentsite.core import invalidation

    user = get_user_model().objects.get(username=username)
    name = f"{agents.PREFIX}{slug}"
    agents.resolve_now(user, name)  # loads the rules (and starts this process's listener)
    invalidation.listen()

    async def timed() -> dict[str, float]:
        for _ in range(100):
            await agents.aresolve(user, name)
        figures = {}
        for label, call in (("aresolve agent:<slug>", lambda: agents.aresolve(user, name)),
                            ("aresolve agent", lambda: agents.aresolve(user, agents.PLAIN))):
            samples = []
            for _ in range(rounds):
                started = time.perf_counter()
                await call()
                samples.append((time.perf_counter() - started) * 1e6)
            figures[label] = percentile(samples, 50)
        samples = []
        for _ in range(rounds):
            started = time.perf_counter()
            agents.is_agent_model("fake-model")
            samples.append((time.perf_counter() - started) * 1e6)
        figures["is_agent_model(plain)"] = percentile(samples, 50)
        return figures

    with CaptureQueriesContext(connection) as queries:
        figures = asyncio.run(timed())
    figures["queries"] = float(len(queries))
    figures["connected"] = float(invalidation.connected())
    return figures


async def auth_overhead(args: argparse.Namespace, token: str, key: str, stream: bool) -> dict:
    """The same requests through the target with the dashboard token and with the API key, alternating one by one
    (latency), then in alternating blocks of 20 (the server's CPU per request for each)."""
    async with _client(token, 4) as with_token, _client(key, 4) as with_key:
        for _ in range(10):  # warm-up: connections, both caches
            await one_request(with_token, args.target, args.model, stream)
            await one_request(with_key, args.target, args.model, stream)
        samples: dict[str, list] = {"token": [], "key": []}
        for index in range(args.requests):
            order = (("token", with_token), ("key", with_key))
            for name, client in order if index % 2 else reversed(order):
                samples[name].append(await one_request(client, args.target, args.model, stream))
        cpu = {"token": 0.0, "key": 0.0}
        block = 20
        for index in range(max(1, args.requests // block)):
            for name, client in (("token", with_token), ("key", with_key)) if index % 2 else (
                    ("key", with_key), ("token", with_token)):
                before = cpu_seconds(args.server_pid)
                for _ in range(block):
                    await one_request(client, args.target, args.model, stream)
                cpu[name] += cpu_seconds(args.server_pid) - before
        done = max(1, args.requests // block) * block
    return {name: {**_figures(values), "server_cpu_ms": cpu[name] * 1000 / done} for name, values in samples.items()}


def print_auth_overhead(title: str, figures: dict) -> None:
    print(f"\n{title}")
    print(f"{'credential':<22}{'TTFT p50':>10}{'total p50':>11}{'total p99':>11}{'CPU/req':>9}   (ms)")
    for name in ("token", "key"):
        row = figures[name]
        print(f"{name:<22}{row['ttft_p50']:>10.3f}{row['total_p50']:>11.3f}{row['total_p99']:>11.3f}"
              f"{row['server_cpu_ms']:>9.3f}")
    token, key = figures["token"], figures["key"]
    print(f"{'added by the key':<22}{key['ttft_p50'] - token['ttft_p50']:>10.3f}"
          f"{key['total_p50'] - token['total_p50']:>11.3f}{key['total_p99'] - token['total_p99']:>11.3f}"
          f"{key['server_cpu_ms'] - token['server_cpu_ms']:>9.3f}")


def make_api_key(server, token: str) -> str:
    """A new API key (scope v1) of the local server's admin."""
    import requests

    answer = requests.post(f"{server.base_url}/api/keys", headers={"Authorization": f"Bearer {token}"}, timeout=10,
                           json={"name": "bench", "scopes": ["v1"]})
    answer.raise_for_status()
    return answer.json()["key"]


async def throughput(args: argparse.Namespace, concurrency: int, stream: bool) -> tuple[float, float | None]:
    """(requests/s through the target, server CPU ms per request) at this concurrency."""
    if args.light:
        import loadgen

        cpu_before, upstream_before = cpu_seconds(args.server_pid), cpu_seconds(getattr(args, "upstream_pid", None))
        client_before = time.process_time()
        done, elapsed = await loadgen.throughput(args.target, args.api_key, args.model, concurrency, args.seconds,
                                                 stream)
        cpu = cpu_seconds(args.server_pid) - cpu_before
        harness = (time.process_time() - client_before
                   + cpu_seconds(getattr(args, "upstream_pid", None)) - upstream_before) / elapsed
        print(f"  ({'streaming' if stream else 'non-streaming'}, concurrency {concurrency}: the server used "
              f"{cpu / elapsed:.2f} cores, this client and the upstream {harness:.2f})")
        return done / elapsed, (cpu * 1000 / done if args.server_pid and done else None)
    done = 0
    deadline = time.perf_counter() + args.seconds
    async with _client(args.api_key, concurrency) as client:
        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                await one_request(client, args.target, args.model, stream)
                done += 1

        cpu_before = cpu_seconds(args.server_pid)
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
        cpu = cpu_seconds(args.server_pid) - cpu_before
    return done / elapsed, (cpu * 1000 / done if args.server_pid and done else None)


# --- the local upstream and server ---


def serve_upstream(tokens: int, pace_ms: float = 0.0) -> None:
    """Run the fake upstream in this process until SIGTERM (the benchmark starts it as a child)."""
    from tests.fakes.llm import FakeOpenAI, Text

    class BenchUpstream(FakeOpenAI):
        def record(self, request):  # noqa: ANN001 - thousands of requests: keep none of them
            return False

    words = [f"tok{i} " for i in range(tokens)]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    reply = Text("".join(words), pieces=words, delay=pace_ms / 1000)
    with BenchUpstream(default_reply=reply) as fake:
        print(fake.base_url, flush=True)
        stop.wait()


def start_upstream(tokens: int, pace_ms: float = 0.0, light: bool = False) -> tuple[subprocess.Popen, str]:
    """The fake upstream in a process of its own: tests/fakes' FakeOpenAI, or with `light` loadgen's
    TickerUpstream (bench/loadgen.py); (its process, its base URL)."""
    command = [sys.executable, str(Path(__file__).with_name("loadgen.py")), "upstream"] if light else \
        [sys.executable, __file__, "--serve-upstream"]
    proc = subprocess.Popen([*command, "--tokens", str(tokens), "--pace-ms", str(pace_ms)], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    base_url = proc.stdout.readline().strip()
    if not base_url.startswith("http"):
        proc.kill()
        raise RuntimeError(f"the fake upstream did not start (printed {base_url!r})")
    return proc, base_url


def start_agentsite(upstream: str, alias: str | None = None, env: dict[str, str] | None = None):
    """An agentsite server (daphne only, SQLite) pointed at the upstream, with `alias` made for its one model
    (the catalogue entry default/fake-model); (server, dashboard token). `env`: more of its environment."""
    import requests

    from tests.server import LiveServer

    server = LiveServer(command="daphne", env={"AGENTSITE_LOGIN_RATE_LIMIT": "1000",
                                               "AGENTSITE_LOG_LEVEL": "WARNING", **(env or {})})
    server.start()
    token = server.login()["token"]
    requests.patch(f"{server.base_url}/api/config", headers={"Authorization": f"Bearer {token}"}, timeout=10, json={
        "provider": "openai", "base_url": upstream, "api_key": "sk-bench", "model": "fake-model",
    }).raise_for_status()
    if alias:
        requests.post(f"{server.base_url}/api/aliases", headers={"Authorization": f"Bearer {token}"}, timeout=10,
                      json={"name": alias, "strategy": "fallback", "targets": [{"model": "default/fake-model"}]},
                      ).raise_for_status()
    return server, token


def make_agent(server, token: str, slug: str, model: str) -> None:
    """The agent `slug` on the server, owned by its admin: the model the plain requests ask for, no tools, no
    knowledge, no instructions; and the deployment's agent (`agent`, the agent `default`) made the same through
    /api/config (no tools, no knowledge base, no system prompt), so that `agent:<slug>` and `agent` differ in
    their name alone."""
    import requests

    requests.patch(f"{server.base_url}/api/config", headers={"Authorization": f"Bearer {token}"}, timeout=10,
                   json={"system_prompt": "", "tools": [], "kb_enabled": False}).raise_for_status()
    response = requests.post(f"{server.base_url}/api/agents", headers={"Authorization": f"Bearer {token}"},
                             timeout=10, json={"slug": slug, "name": "Bench", "instructions": "",
                                               "model": model, "tools": [], "knowledge": []})
    if response.status_code != 201:
        raise RuntimeError(f"the agent {slug!r} could not be made: {response.status_code} {response.text[:300]}")


class ServeServer:
    """`manage.py serve` as the README's first command leaves it: a fresh data directory, the embedded SQLite
    default (no DATABASE_URL, no REDIS_URL), the task cluster and the scheduler's timer running, its own
    output, default settings. `--port 0` picks the port; `workers` None leaves serve's default (one a CPU,
    at most 8). start() waits for the start message and /api/health; stop() is a Ctrl-C (SIGINT)."""

    def __init__(self, workers: int | None = None, env: dict[str, str] | None = None):
        self.workers = workers
        self.data_dir = Path(tempfile.mkdtemp(prefix="agentsite-bench-serve-"))
        self.extra_env = env or {}
        self.proc: subprocess.Popen | None = None
        self.base_url = ""

    def start(self, timeout: float = 120.0) -> ServeServer:
        import re

        import requests

        env = {key: value for key, value in os.environ.items()
               if key not in ("DATABASE_URL", "REDIS_URL", "AGENTSITE_Q_SYNC") and not key.startswith("PYTEST")}
        env.update({"AGENTSITE_DATA_DIR": str(self.data_dir), "PYTHONUNBUFFERED": "1", **self.extra_env})
        workers = [] if self.workers is None else ["--workers", str(self.workers)]
        self.log_path = self.data_dir / "serve.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", "0", *workers], cwd=ROOT,
                                         env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited with {self.proc.returncode}:\n{self.log()}")
            found = re.search(r"serving on (http://[\d.]+:\d+)/", self.log())
            if found:
                self.base_url = found.group(1)
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"serve did not start within {timeout:g} s:\n{self.log()}")
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{self.base_url}/api/health", timeout=2).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"serve did not answer /api/health within {timeout:g} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def login(self) -> str:
        """A dashboard token of the first admin, logged in with the password serve wrote to the data dir."""
        import requests

        text = (self.data_dir / "initial_admin.txt").read_text()
        password = next(line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("password: "))
        answer = requests.post(f"{self.base_url}/api/auth/login", timeout=10,
                               json={"username": "admin", "password": password})
        answer.raise_for_status()
        return answer.json()["token"]

    def stop(self) -> None:
        """Ctrl-C, then its data directory removed (a run of this benchmark starts serve several times)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # Ctrl-C: serve stops its children in order
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.data_dir, ignore_errors=True)


def start_serve(upstream: str, workers: int | None, alias: str | None = None, env: dict[str, str] | None = None,
                ) -> tuple[ServeServer, str]:
    """serve (ServeServer) pointed at the upstream through PATCH /api/config as its admin would, with `alias`
    made for its one model; (server, the admin's dashboard token). `env`: more of serve's environment."""
    import requests

    server = ServeServer(workers, env).start()
    token = server.login()
    headers = {"Authorization": f"Bearer {token}"}
    requests.patch(f"{server.base_url}/api/config", headers=headers, timeout=10, json={
        "provider": "openai", "base_url": upstream, "api_key": "sk-bench", "model": "fake-model",
    }).raise_for_status()
    if alias:
        requests.post(f"{server.base_url}/api/aliases", headers=headers, timeout=10,
                      json={"name": alias, "strategy": "fallback", "targets": [{"model": "default/fake-model"}]},
                      ).raise_for_status()
    return server, token


def _roles(root: int) -> dict[int, str]:
    """What each process of serve's tree is: serve itself (its supervisor loop and the scheduler's timer), its
    daphne workers, and the task cluster: qcluster's main process, its sentinel, and the sentinel's children
    (django-q2's task workers, monitor and pusher, told apart by pid in the order the sentinel made them: a
    process it made again later is misnamed)."""
    roles, queue = {root: "serve (supervisor, timer)"}, [(root, 0, "")]
    while queue:
        pid, depth, kind = queue.pop()
        children = sorted(_children(pid))
        for child in children:
            if depth == 0:
                try:
                    argv = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                kind = "daphne" if "daphne" in argv else "qcluster" if "qcluster" in argv else argv[:30]
                roles[child] = kind if kind != "qcluster" else "qcluster (main)"
            elif kind == "qcluster":
                # django-q2's sentinel makes its task workers, then the monitor, then the pusher.
                position = len(children) - children.index(child)
                roles[child] = "qcluster (sentinel)" if depth == 1 else "qcluster pusher" if position == 1 else \
                    "qcluster monitor" if position == 2 else "qcluster task workers"
            else:
                roles[child] = f"{kind} child"
            queue.append((child, depth + 1, kind))
    return roles


def cpu_by_role(pid: int) -> dict[str, float]:
    """CPU seconds of each kind of process in pid's tree (_roles), summed per kind (_cpu_of)."""
    totals: dict[str, float] = {}
    for member, role in _roles(pid).items():
        totals[role] = totals.get(role, 0.0) + _cpu_of(member)
    return totals


def idle_cpu(pid: int, seconds: float) -> dict[str, float]:
    """CPU ms per second of wall time that each kind of process in pid's tree uses while nothing is asked."""
    before = cpu_by_role(pid)
    time.sleep(seconds)
    after = cpu_by_role(pid)
    return {role: (after[role] - before.get(role, 0.0)) * 1000 / seconds for role in after}


def print_roles(title: str, figures: dict[str, float], unit: str) -> None:
    print(f"\n{title}")
    for role, value in sorted(figures.items(), key=lambda item: -item[1]):
        print(f"  {role:<38}{value:>9.2f} {unit}")
    print(f"  {'all of serve':<38}{sum(figures.values()):>9.2f} {unit}")


# --- output ---


def print_latency(title: str, figures: dict) -> None:
    direct, via = figures["direct"], figures["target"]
    print(f"\n{title}")
    print(f"{'path':<22}{'TTFT p50':>10}{'TTFT p99':>10}{'total p50':>11}{'total p99':>11}   (ms)")
    for name, row in (("direct to upstream", direct), ("through target", via)):
        print(f"{name:<22}{row['ttft_p50']:>10.2f}{row['ttft_p99']:>10.2f}"
              f"{row['total_p50']:>11.2f}{row['total_p99']:>11.2f}")
    print(f"{'added by the target':<22}{via['ttft_p50'] - direct['ttft_p50']:>10.2f}"
          f"{via['ttft_p99'] - direct['ttft_p99']:>10.2f}{via['total_p50'] - direct['total_p50']:>11.2f}"
          f"{via['total_p99'] - direct['total_p99']:>11.2f}")
    if figures["server_cpu_ms"] is not None:
        print(f"server CPU per request: {figures['server_cpu_ms']:.2f} ms")


METRICS_BLOCK = 20


async def metrics_on_off(args: argparse.Namespace, on: dict, off: dict, stream: bool) -> dict:
    """Two servers against one upstream, metrics on and off (issue 28, item 7), both running throughout, used in
    alternating blocks of METRICS_BLOCK: within a block, requests to the upstream and to that block's server
    alternate one by one (as `latency` does), so each server is measured as a client uses one, in steady use;
    each server's CPU per request over its own blocks. (Rotating every request across the two servers made
    each request land on a server whose caches the other had just displaced: ~0.5 ms more "added" for both on
    2 cores, bench/RESULTS.md.)"""
    async with _client(on["key"], 4) as client_on, _client(off["key"], 4) as client_off, \
            _client(args.api_key, 4) as client_direct:
        servers = {"metrics on": (client_on, on["target"], on["pid"]),
                   "metrics off": (client_off, off["target"], off["pid"])}
        for _ in range(5):
            await one_request(client_direct, args.upstream, args.upstream_model, stream)
            for client, base, _pid in servers.values():
                await one_request(client, base, args.model, stream)
        samples: dict[str, list] = {"direct": [], "metrics on": [], "metrics off": []}
        cpu = {name: 0.0 for name in servers}
        names = list(servers)
        for block in range(max(1, args.requests // METRICS_BLOCK)):
            name = names[(block + block // 2) % 2]  # off on on off off on ...: neither always goes first
            client, base, pid = servers[name]
            before = cpu_seconds(pid)
            for index in range(METRICS_BLOCK):
                order = (("direct", client_direct, args.upstream, args.upstream_model),
                         (name, client, base, args.model))
                for way, way_client, way_base, model in order if index % 2 else reversed(order):
                    samples[way].append(await one_request(way_client, way_base, model, stream))
            cpu[name] += cpu_seconds(pid) - before
    figures = {name: _figures(rows) for name, rows in samples.items()}
    figures["cpu_ms"] = {name: value * 1000 / len(samples[name]) for name, value in cpu.items()}
    return figures


def print_metrics_on_off(title: str, figures: dict) -> None:
    direct = figures["direct"]
    print(f"\n{title}")
    print(f"{'path':<14}{'TTFT p50':>10}{'total p50':>11}{'total p99':>11}{'+TTFT p50':>11}{'+total p50':>11}"
          f"{'CPU/req':>9}   (ms)")
    for name in ("direct", "metrics off", "metrics on"):
        row = figures[name]
        ttft = row["ttft_p50"] - direct["ttft_p50"] if name != "direct" else 0.0
        added = row["total_p50"] - direct["total_p50"] if name != "direct" else 0.0
        cpu = figures["cpu_ms"].get(name)
        print(f"{name:<14}{row['ttft_p50']:>10.2f}{row['total_p50']:>11.2f}{row['total_p99']:>11.2f}{ttft:>11.2f}"
              f"{added:>11.2f}{_ms(cpu):>9}")


async def run(args: argparse.Namespace) -> dict:
    results: dict = {"tokens": args.tokens, "requests": args.requests, "pace_ms": args.pace_ms}
    if getattr(args, "metrics_servers", None):
        on, off = args.metrics_servers
        results["metrics"] = {}
        for stream in (False, True):
            kind = "streaming" if stream else "non-streaming"
            figures = await metrics_on_off(args, on, off, stream)
            print_metrics_on_off(f"metrics on vs off, {kind}, {args.requests} requests each, alternating blocks of "
                                 f"{METRICS_BLOCK}", figures)
            results["metrics"][kind] = figures
        return results
    if args.agent:
        results["agent"] = {}
        for stream in (False, True):
            kind = "streaming" if stream else "non-streaming"
            rounds = await agent_vs_model(args, stream)
            medians = print_agent_rounds(f"agent:{args.agent} vs {args.model!r} and `agent`, {kind}, {args.rounds} "
                                         f"rounds of {args.requests} each, interleaved", rounds, stream)
            results["agent"][kind] = {"rounds": rounds, "added_median_ms": medians}
        return results
    if args.api:
        for stream in (False, True):
            kind = "streaming" if stream else "non-streaming"
            figures = await door_vs_chat(args, stream)
            print_doors(f"/v1/{args.api} vs /v1/chat/completions, {kind}, {args.requests} requests each, "
                        f"interleaved, {args.tokens} tokens each", figures)
            results[f"{args.api}_{kind}"] = figures
        return results
    if args.entry:
        results["alias_vs_entry"] = {}
        for stream in (False, True):
            kind = "streaming" if stream else "non-streaming"
            figures = await alias_vs_entry(args, stream)
            results["alias_vs_entry"][kind] = figures
            alias, entry = figures["alias"], figures["entry"]
            print(f"\nalias {args.model!r} vs entry {args.entry!r}, {kind}, {args.requests} each, interleaved (ms)")
            print(f"{'':<10}{'TTFT p50':>10}{'total p50':>11}{'total p99':>11}")
            for name, row in (("alias", alias), ("entry", entry)):
                print(f"{name:<10}{row['ttft_p50']:>10.3f}{row['total_p50']:>11.3f}{row['total_p99']:>11.3f}")
            print(f"{'added':<10}{alias['ttft_p50'] - entry['ttft_p50']:>10.3f}"
                  f"{alias['total_p50'] - entry['total_p50']:>11.3f}")
        costs = resolve_cost_us()
        results["resolve_us"] = costs
        print("in-process resolve + order, p50: "
              + ", ".join(f"{name} {value:.2f} µs" for name, value in costs.items()))
        if args.alias_only:
            return results
    if getattr(args, "compare_token", None):
        for stream in (False, True):
            kind = "streaming" if stream else "non-streaming"
            figures = await auth_overhead(args, args.compare_token, args.api_key, stream)
            print_auth_overhead(f"API key vs dashboard token, {kind}, {args.requests} requests each, interleaved",
                                figures)
            results[f"auth_{kind}"] = figures
    for stream in (False, True) if args.only != "throughput" else ():
        kind = "streaming" if stream else "non-streaming"
        figures = await latency(args, stream)
        print_latency(f"{kind}, {args.requests} requests each way, interleaved, {args.tokens} tokens each"
                      + (f", paced {args.pace_ms} ms" if args.pace_ms else ""), figures)
        if stream and figures["server_cpu_ms"] is not None:
            print(f"server CPU per streamed event: {figures['server_cpu_ms'] * 1000 / max(1, args.tokens):.0f} µs")
        results[kind] = figures
    if args.only == "latency":
        return results
    print(f"\nthroughput through the target ({args.seconds:.0f} s per level; requests/s, server CPU ms/request)")
    print(f"{'concurrency':<14}{'streaming':>12}{'CPU':>8}{'non-streaming':>15}{'CPU':>8}")
    results["rps"] = {}
    for concurrency in args.concurrency:
        streaming, streaming_cpu = await throughput(args, concurrency, True)
        plain, plain_cpu = await throughput(args, concurrency, False)
        print(f"{concurrency:<14}{streaming:>12.1f}{_ms(streaming_cpu):>8}{plain:>15.1f}{_ms(plain_cpu):>8}")
        results["rps"][concurrency] = {"streaming": streaming, "streaming_cpu_ms": streaming_cpu,
                                       "non_streaming": plain, "non_streaming_cpu_ms": plain_cpu}
    results["server_rss_mib"] = rss_mib(args.server_pid)
    if results["server_rss_mib"] is not None:
        print(f"\nserver resident memory after the benchmark (VmRSS): {results['server_rss_mib']:.1f} MiB")
    return results


# --- --floor: agentsite beside the two relays (issue 51) ---


FLOOR_GOALS = {"cpu_ratio": 1.2, "ttft_ms": 1.0, "plain_ms": 0.7, "metrics_pct": 5.0}
CHAT_DELTA = re.compile(rb'event: delta\ndata: \{"content": ?"[^"]')  # the chat stream's first token
CHAT_ERROR = re.compile(rb"(^|\n)event: error\n")


def thread_switches(pid: int) -> dict[int, int]:
    """Voluntary context switches of each live thread of pid (a thread's sleeps: the event loop's waits for
    its next event, a worker thread's waits for its next job)."""
    found = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            status = task.joinpath("status").read_text()
        except OSError:
            continue
        found[int(task.name)] = next(int(line.split()[1]) for line in status.splitlines()
                                     if line.startswith("voluntary_ctxt_switches:"))
    return found


class Probe:
    """One server process for --floor: before and after a request, its CPU (all threads, schedstat), the event
    loop thread's voluntary switches (its wake-ups: the loop's thread is the process's main thread, for
    aiohttp and for daphne under Twisted alike) and the other threads' (each a job handed to a thread and
    waited for: a thread crossing). `tree` (serve's pid): also the CPU of the whole process tree."""

    def __init__(self, pid: int, tree: int | None = None):
        self.pid, self.tree = pid, tree

    def read(self) -> tuple[float, float, dict[int, int]]:
        return _cpu_of(self.pid), cpu_seconds(self.tree) if self.tree else 0.0, thread_switches(self.pid)

    def since(self, before: tuple[float, float, dict[int, int]]) -> dict[str, float]:
        cpu, tree, switches = self.read()
        wakeups = switches.get(self.pid, 0) - before[2].get(self.pid, 0)
        crossings = sum(count - before[2].get(tid, 0) for tid, count in switches.items() if tid != self.pid)
        return {"cpu": cpu - before[0], "tree": tree - before[1], "wakeups": wakeups, "crossings": crossings}


def serve_worker(server: ServeServer) -> int:
    """The pid of serve's one daphne worker (--workers 1)."""
    workers = [pid for pid, role in _roles(server.pid).items() if role == "daphne"]
    if len(workers) != 1:
        raise RuntimeError(f"serve should run one daphne worker, found {workers}")
    return workers[0]


def start_relay(script: str, upstream: str) -> tuple[subprocess.Popen, str]:
    """bench/relay.py or bench/relay_daphne.py on a free port, answering; (its process, its /v1 base URL)."""
    import socket

    import requests

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name(script)), upstream, str(port)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200:
                return proc, f"http://127.0.0.1:{port}/v1"
        except requests.RequestException:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{script} did not answer")


async def floor_run(args: argparse.Namespace, servers: dict, kinds: dict) -> dict:
    """Every kind (name: (server name, call)) one by one in rotating order, --requests rounds, streaming then
    non-streaming (the /v1 kinds only); per request the latency and its server's Probe deltas."""
    results: dict = {}
    for stream in (True, False):
        names = [name for name, (_server, call, chat) in kinds.items() if stream or not chat]
        for _ in range(3):  # warm-up: connections, caches, lazy imports
            for name in names:
                await kinds[name][1](stream)
        rows: dict[str, list] = {name: [] for name in names}
        for index in range(args.requests):
            shift = index % len(names)
            for name in names[shift:] + names[:shift]:
                server_name, call, chat = kinds[name]
                probe = servers.get(server_name)
                prepare = getattr(call, "prepare", None)
                if prepare is not None:
                    await prepare()
                before = probe.read() if probe else None
                ttft, total = await call(stream)
                rows[name].append((ttft, total, probe.since(before) if probe else None))
        results["streaming" if stream else "non-streaming"] = rows
    return results


def _sum(rows: list, field: str) -> float:
    return sum(row[2][field] for row in rows) / len(rows)


def floor_table(args: argparse.Namespace, results: dict, idle: dict[str, float]) -> dict:
    """Per kind: the p50s added over the upstream, CPU per streamed event and per request, wake-ups and
    crossings per event; printed, and returned for the goals."""
    table: dict = {}
    streamed, plain = results["streaming"], results["non-streaming"]
    direct_ttft = percentile([row[0] for row in streamed["direct"]], 50) * 1000
    direct_plain = percentile([row[1] for row in plain["direct"]], 50) * 1000
    print(f"\nstreaming: {args.tokens} tokens paced {args.pace_ms:g} ms, {args.requests} requests of each kind in "
          f"rotating order; per streamed event the server process's CPU (µs), its event loop thread's wake-ups and "
          f"its other threads' wake-ups (thread crossings); serve's whole tree beside")
    print(f"{'kind':<30}{'TTFT p50':>9}{'+TTFT':>8}{'CPU/ev':>8}{'tree/ev':>9}{'wake/ev':>9}{'cross/ev':>9}"
          f"{'+plain':>8}{'CPU/req':>9}")
    for name, rows in streamed.items():
        ttft = percentile([row[0] for row in rows], 50) * 1000
        entry = {"ttft_p50": ttft, "ttft_added": ttft - direct_ttft}
        if rows[0][2] is not None:
            events = max(1, args.tokens)
            entry.update({"cpu_event_us": _sum(rows, "cpu") * 1e6 / events,
                          "tree_event_us": _sum(rows, "tree") * 1e6 / events,
                          "wakeups_event": _sum(rows, "wakeups") / events,
                          "crossings_event": _sum(rows, "crossings") / events})
        if name in plain:
            total = percentile([row[1] for row in plain[name]], 50) * 1000
            entry["plain_added"] = total - direct_plain
            if plain[name][0][2] is not None:
                entry["plain_cpu_ms"] = _sum(plain[name], "cpu") * 1000
        table[name] = entry
        print(f"{name:<30}{ttft:>9.2f}{entry['ttft_added']:>8.2f}"
              + (f"{entry['cpu_event_us']:>8.0f}{entry['tree_event_us']:>9.0f}{entry['wakeups_event']:>9.2f}"
                 f"{entry['crossings_event']:>9.2f}" if "cpu_event_us" in entry else " " * 35)
              + (f"{entry['plain_added']:>8.2f}" if "plain_added" in entry else " " * 8)
              + (f"{entry['plain_cpu_ms']:>9.2f}" if "plain_cpu_ms" in entry else ""))
    print("(ms unless said; +TTFT and +plain: p50 over the upstream's own p50, streamed first token and "
          "non-streaming reply; tree/ev: serve's whole process tree, 0 for the relays; idle CPU of each server "
          "process before the run: " + ", ".join(f"{name} {value:.2f} ms/s" for name, value in idle.items()) + ")")
    return table


def floor_goals(table: dict) -> None:
    """Item 2's goals: each agentsite kind against the daphne relay (and metrics on against off)."""
    relay = table["daphne relay /v1"]
    print("\ngoals against the daphne relay: CPU/event ≤ "
          f"{FLOOR_GOALS['cpu_ratio']}×, +TTFT ≤ relay + {FLOOR_GOALS['ttft_ms']} ms, +plain ≤ relay + "
          f"{FLOOR_GOALS['plain_ms']} ms; metrics on ≤ off + {FLOOR_GOALS['metrics_pct']:g}% CPU")
    print(f"{'kind':<30}{'CPU ×':>8}{'':>4}{'+TTFT −relay':>14}{'':>4}{'+plain −relay':>15}{'':>4}")
    for name, entry in table.items():
        if not name.startswith("agentsite"):
            continue
        ratio = entry["cpu_event_us"] / relay["cpu_event_us"]
        ttft = entry["ttft_added"] - relay["ttft_added"]
        cells = f"{ratio:>8.2f}{_ok(ratio <= FLOOR_GOALS['cpu_ratio'])}{ttft:>+14.2f}" \
                f"{_ok(ttft <= FLOOR_GOALS['ttft_ms'])}"
        if "plain_added" in entry:
            plain = entry["plain_added"] - relay["plain_added"]
            cells += f"{plain:>+15.2f}{_ok(plain <= FLOOR_GOALS['plain_ms'])}"
        print(f"{name:<30}{cells}")
    for name, entry in table.items():
        if name.startswith("agentsite+metrics"):
            off = table[name.replace("agentsite+metrics", "agentsite")]
            pct = (entry["cpu_event_us"] / off["cpu_event_us"] - 1) * 100
            line = f"metrics on − off, {name[len('agentsite+metrics '):]}: CPU/event {pct:+.1f}%" \
                   f"{_ok(pct <= FLOOR_GOALS['metrics_pct'])}"
            if "plain_cpu_ms" in entry:
                plain = (entry["plain_cpu_ms"] / off["plain_cpu_ms"] - 1) * 100
                line += f", CPU per non-streaming request {plain:+.1f}%"
            print(line)


def _ok(met: bool) -> str:
    return "  ok" if met else "  >"


class ChatTurn:
    """A chat turn (POST /api/sessions/:id/chat) on a fresh named session (no title request, no history); the
    session is made by `prepare`, outside the measured request."""

    def __init__(self, client: aiohttp.ClientSession, base: str):
        self.client, self.base, self.session = client, base, ""

    async def prepare(self) -> None:
        async with self.client.post(f"{self.base}/api/sessions", json={"name": "bench"}) as response:
            response.raise_for_status()
            self.session = (await response.json())["id"]

    async def __call__(self, stream: bool) -> tuple[float, float]:
        if not self.session:
            await self.prepare()
        session, self.session = self.session, ""
        return await _timed(self.client, f"{self.base}/api/sessions/{session}/chat", {"message": "Count for me."},
                            CHAT_DELTA, stream=True, error=CHAT_ERROR)


async def floor_measure(args: argparse.Namespace, relays: dict[str, tuple[str, int]], sites: dict) -> dict:
    """The kinds of --floor through their servers: `relays` name: (base, pid); `sites` label: (server, token,
    key)."""
    from contextlib import AsyncExitStack

    servers: dict[str, Probe] = {}
    kinds: dict = {}
    async with AsyncExitStack() as stack:
        anonymous = await stack.enter_async_context(_client("bench", 4))

        def v1(client: aiohttp.ClientSession, base: str, model: str = args.model):
            return lambda stream: one_request(client, base, model, stream)

        kinds["direct"] = (None, v1(anonymous, args.upstream, args.upstream_model), False)
        for name, (base, pid) in relays.items():
            servers[name] = Probe(pid)
            kinds[f"{name} /v1"] = (name, v1(anonymous, base), False)
        for label, (server, token, key) in sites.items():
            servers[label] = Probe(serve_worker(server), server.pid)
            with_token = await stack.enter_async_context(_client(token, 4))
            with_key = await stack.enter_async_context(_client(key, 4))
            kinds[f"{label} anon /v1"] = (label, v1(anonymous, f"{server.base_url}/v1"), False)
            kinds[f"{label} key /v1"] = (label, v1(with_key, f"{server.base_url}/v1"), False)
            kinds[f"{label} token chat"] = (label, ChatTurn(with_token, server.base_url), True)
            kinds[f"{label} key chat"] = (label, ChatTurn(with_key, server.base_url), True)
        idle = await _idle(servers, 3.0)
        results = await floor_run(args, servers, kinds)
    return {"results": results, "idle": idle}


async def _idle(servers: dict[str, Probe], seconds: float) -> dict[str, float]:
    """Each server process's CPU ms per second while nothing is asked."""
    before = {name: probe.read() for name, probe in servers.items()}
    await asyncio.sleep(seconds)
    return {name: probe.since(before[name])["cpu"] * 1000 / seconds for name, probe in servers.items()}


def main_floor(args: argparse.Namespace) -> None:
    """--floor: one paced upstream; bench/relay.py, bench/relay_daphne.py and `manage.py serve --workers 1`
    (with --metrics a second serve with AGENTSITE_METRICS=1) against it; floor_measure through all of them."""
    import requests

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    procs: list[subprocess.Popen] = []
    sites: dict = {}
    try:
        upstream, args.upstream = start_upstream(args.tokens, args.pace_ms)
        procs.append(upstream)
        relays = {}
        for name, script in (("aiohttp relay", "relay.py"), ("daphne relay", "relay_daphne.py")):
            proc, base = start_relay(script, args.upstream)
            procs.append(proc)
            relays[name] = (base, proc.pid)
        for label, env in (("agentsite", {}), ("agentsite+metrics", {"AGENTSITE_METRICS": "1"}))[
                :2 if args.metrics else 1]:
            server, token = start_serve(args.upstream, 1, env=env)
            sites[label] = (server, token, None)
            answer = requests.post(
                f"{server.base_url}/api/keys", headers={"Authorization": f"Bearer {token}"}, timeout=10,
                json={"name": "bench", "scopes": ["v1", "api"]})
            answer.raise_for_status()
            sites[label] = (server, token, answer.json()["key"])
        print(f"machine: {machine()}")
        print(f"upstream {args.upstream} (pid {upstream.pid}); "
              + "; ".join(f"{name} {base} (pid {pid})" for name, (base, pid) in relays.items()) + "; "
              + "; ".join(f"{label}: manage.py serve --workers 1 {server.base_url} (pid {server.pid}, worker "
                          f"{serve_worker(server)})" for label, (server, _t, _k) in sites.items()))
        time.sleep(2.0)  # serve's start settles
        measured = asyncio.run(floor_measure(args, relays, sites))
        table = floor_table(args, measured["results"], measured["idle"])
        floor_goals(table)
        print(f"load average at the end: {' '.join(f'{value:.2f}' for value in os.getloadavg())}")
    finally:
        for server, _token, _key in sites.values():
            server.stop()
        for proc in procs:
            proc.terminate()
            proc.wait(10)
    if args.json:
        print(json.dumps(table, indent=2))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "unknown CPU")
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    return (f"{os.cpu_count()} cores ({model}), Python {platform.python_version()}, {platform.platform()}, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {load}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", help="OpenAI-compatible base URL to measure (…/v1)")
    parser.add_argument("--upstream", help="the upstream's base URL (…/v1), measured directly")
    parser.add_argument("--server-pid", type=int, help="with --target: the gateway's process id, for CPU and RSS")
    parser.add_argument("--api-key", nargs="?", const=NEW_KEY, help="the API key sent to both (default: a dashboard "
                        "token of the local server's admin; with --target, 'bench'); without a value, an API key "
                        "made on the local server, compared with the dashboard token first")
    parser.add_argument("--model", default="fake-model", help="the model asked of the target (an alias of that "
                        "name is made on a server started here when it is not fake-model)")
    parser.add_argument("--upstream-model", default="fake-model", help="the model asked of the upstream directly")
    parser.add_argument("--entry", help="compare --model with this catalogue entry through the target (default "
                        "with a local server and an alias: default/fake-model)")
    parser.add_argument("--api", choices=sorted(DOORS), help="only this door side by side with "
                        "/v1/chat/completions (and the upstream directly): latency and server CPU per request")
    parser.add_argument("--alias-only", action="store_true", help="only the alias-vs-entry figures")
    parser.add_argument("--agent", nargs="?", const=AGENT_SLUG, help="only agent:<slug> vs the plain model and "
                        "`agent` (issue 45 item 8); on a local server the agent is made here (slug 'bench')")
    parser.add_argument("--rounds", type=int, default=5, help="with --agent: rounds of --requests each")
    parser.add_argument("--tokens", type=int, default=100, help="tokens the local fake upstream streams")
    parser.add_argument("--pace-ms", type=float, default=0.0,
                        help="the local fake upstream waits this long before each streamed token (0: it sends them "
                        "all at once, as a fast upstream does; with a pace each token arrives in a read of its own)")
    parser.add_argument("--requests", type=int, default=200, help="requests each way per latency figure")
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each throughput level")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    parser.add_argument("--serve-upstream", action="store_true", help="only run the fake upstream (--tokens)")
    parser.add_argument("--serve", action="store_true", help="agentsite under `manage.py serve` as the README "
                        "starts it (fresh data dir, SQLite, task cluster and timer running), configured through "
                        "PATCH /api/config; anonymous unless --api-key; CPU summed over serve's process tree")
    parser.add_argument("--workers", default=None, help="with --serve: serve's --workers (default: serve's own "
                        "default); a comma-separated list (1,2) measures each in turn and prints one throughput table")
    parser.add_argument("--concurrency", default=None, help="throughput levels, comma-separated (default 1,8,32; "
                        "with --serve 32,128)")
    parser.add_argument("--only", choices=("latency", "throughput"), help="only the latency or the throughput figures")
    parser.add_argument("--light", action="store_true", help="throughput with bench/loadgen.py's light client (raw "
                        "HTTP/1.1, kept-alive connections, reading only to each reply's end) and, with --only "
                        "throughput and no --upstream, its light upstream (one timer writes each tick's token to "
                        "every open stream): on a small machine the default harness takes cores the server needs")
    parser.add_argument("--idle-seconds", type=float, default=5.0, help="with --serve: how long serve's idle CPU is "
                        "measured (per process kind) before the requests")
    parser.add_argument("--metrics", action="store_true", help="two local servers, AGENTSITE_METRICS=1 and off, "
                        "measured side by side (added latency and CPU per request of each); only those figures")
    parser.add_argument("--floor", action="store_true", help="agentsite under `manage.py serve --workers 1` beside "
                        "bench/relay.py and bench/relay_daphne.py against one paced upstream (issue 51): anonymous "
                        "and with an API key, /v1 and the chat stream, all interleaved; with --metrics also a "
                        "second serve with metrics on")
    args = parser.parse_args()
    if args.serve_upstream:
        serve_upstream(args.tokens, args.pace_ms)
        return
    if args.target and not args.upstream:
        parser.error("--target needs --upstream")
    if args.floor:
        if args.target or args.serve or args.api or args.upstream:
            parser.error("--floor starts its own upstream, relays and serve: not with --target, --upstream, --serve "
                         "or --api")
        main_floor(args)
        return
    levels = args.concurrency or ("32,128" if args.serve else "1,8,32")
    args.concurrency = [int(level) for level in levels.split(",")]
    if args.serve:
        if args.target or args.metrics or args.api:
            parser.error("--serve measures agentsite's /v1/chat/completions under serve: not with --target, "
                         "--metrics or --api")
        main_serve(args)
        return
    if args.workers:
        parser.error("--workers is serve's: with --serve")
    upstream = server = None
    extra_servers: list = []
    metrics_dir = None
    try:
        if not args.target:
            os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
            if not args.upstream:
                upstream, args.upstream = start_upstream(args.tokens, args.pace_ms,
                                                         light=args.light and args.only == "throughput")
            alias = args.model if args.model not in ("fake-model", "default/fake-model") else None
            if alias and not args.entry:
                args.entry = "default/fake-model"
            server, token = start_agentsite(args.upstream, alias)
            if args.agent:
                make_agent(server, token, args.agent, args.model)
            if args.metrics:
                metrics_dir = tempfile.mkdtemp(prefix="agentsite-bench-metrics-")
                other, other_token = start_agentsite(args.upstream, alias, env={
                    "AGENTSITE_METRICS": "1", "PROMETHEUS_MULTIPROC_DIR": metrics_dir})
                extra_servers.append(other)
                args.metrics_servers = ({"target": f"{other.base_url}/v1", "key": other_token, "pid": other.proc.pid},
                                        {"target": f"{server.base_url}/v1", "key": token, "pid": server.proc.pid})
            if args.api_key == NEW_KEY:
                args.api_key, args.compare_token = make_api_key(server, token), token
            args.api_key = args.api_key or token
            args.target, args.server_pid = f"{server.base_url}/v1", server.proc.pid
            print(f"upstream at {args.upstream}{f' (own process, pid {upstream.pid})' if upstream else ''}; "
                  f"agentsite (daphne, SQLite, pid {args.server_pid}) at {server.base_url}")
        if args.api_key == NEW_KEY:
            parser.error("--api-key without a value makes a key on the local server: not with --target")
        args.api_key = args.api_key or "bench"
        print(f"machine: {machine()}")
        results = asyncio.run(run(args))
        if args.agent and server is not None:
            costs = agent_resolve_cost_us(server.data_dir, "admin", args.agent)
            results["agent"]["resolve_us"] = costs
            print(f"in-process p50: aresolve agent:{args.agent} {costs['aresolve agent:<slug>']:.2f} µs, aresolve "
                  f"agent {costs['aresolve agent']:.2f} µs, is_agent_model(plain) "
                  f"{costs['is_agent_model(plain)']:.2f} µs; queries on the cached path: "
                  f"{costs['queries']:.0f}; invalidation connected: {bool(costs['connected'])}")
    finally:
        if server:
            server.stop()
        for other in extra_servers:
            other.stop()
        if metrics_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)
        if upstream:
            upstream.terminate()
            upstream.wait(10)
    if args.json:
        print(json.dumps(results, indent=2))


def main_serve(args: argparse.Namespace) -> None:
    """--serve: for each worker count, serve started afresh against one fake upstream, then run() through it."""
    counts: list[int | None] = [int(count) for count in args.workers.split(",")] if args.workers else [None]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    make_key, upstream = args.api_key == NEW_KEY, None
    alias = args.model if args.model not in ("fake-model", "default/fake-model") else None
    if alias and not args.entry:
        args.entry = "default/fake-model"
    results: dict = {}
    try:
        if not args.upstream:
            upstream, args.upstream = start_upstream(args.tokens, args.pace_ms,
                                                     light=args.light and args.only == "throughput")
            args.upstream_pid = upstream.pid
        print(f"machine: {machine()}")
        for count in counts:
            server, token = start_serve(args.upstream, count, alias)
            try:
                if make_key:
                    args.api_key = make_api_key(server, token)
                elif args.api_key is None:
                    args.api_key = "bench"  # not a token nor a key: anonymous, served from loopback (compat_auth)
                caller = "an API key" if make_key else "a dashboard token" if args.api_key == token else \
                    "anonymous (compat_auth local, loopback)"
                args.target, args.server_pid = f"{server.base_url}/v1", server.pid
                workers = count if count is not None else "serve's default"
                print(f"\n=== manage.py serve, workers: {workers}, pid {server.pid}, {server.base_url}, "
                      f"data dir {server.data_dir}; caller: {caller}; upstream {args.upstream}"
                      + (f" (own process, pid {upstream.pid})" if upstream else ""))
                time.sleep(2.0)  # the start's own work (the cluster's first looks, the timer's first read) settles
                if args.idle_seconds > 0:
                    print_roles(f"serve idle for {args.idle_seconds:g} s: CPU per process kind",
                                idle_cpu(server.pid, args.idle_seconds), "ms/s")
                before = cpu_by_role(server.pid)
                result = asyncio.run(run(args))
                after = cpu_by_role(server.pid)
                print_roles("CPU of serve's processes over all the requests above, per kind",
                            {role: (after[role] - before.get(role, 0.0)) for role in after}, "s")
                results[str(workers)] = result
            finally:
                server.stop()
                if make_key:
                    args.api_key = NEW_KEY
    finally:
        if upstream:
            upstream.terminate()
            upstream.wait(10)
    if args.only != "latency" and len(results) > 1:
        print(f"\nthroughput under serve by workers ({args.seconds:.0f} s per level; requests/s, server CPU "
              f"ms/request{f'; upstream paced {args.pace_ms:g} ms' if args.pace_ms else ''})")
        print(f"{'workers':<9}{'concurrency':<13}{'streaming':>11}{'CPU':>8}{'non-streaming':>15}{'CPU':>8}")
        for workers, result in results.items():
            for level, row in result["rps"].items():
                print(f"{workers:<9}{level:<13}{row['streaming']:>11.1f}{_ms(row['streaming_cpu_ms']):>8}"
                      f"{row['non_streaming']:>15.1f}{_ms(row['non_streaming_cpu_ms']):>8}")
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

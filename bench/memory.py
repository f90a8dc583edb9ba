"""Memory of `manage.py serve`: the idle process tree's footprint, and whether a worker grows under load
(issue 51 item 3).

    python bench/memory.py [--workers 2] [--idle-seconds 10] [--requests 10000] [--threads 4] [--json]
    python bench/memory.py --idle-only          # only the idle tree, no requests

It starts `manage.py serve --workers N` as the README's first command leaves it (a fresh data directory,
SQLite, the task cluster and the scheduler's timer on; bench/compat.py's ServeServer), waits for
/api/health and then --idle-seconds with nothing asked, and walks the whole process tree by parent pid: the
supervisor, every child and every child's child. Each process is named by its command line or comm where
they say what it is (daphne, qcluster), and otherwise by its place in the tree (a direct child of the
supervisor with grandchildren is the task cluster, any other is a worker), so the walk holds
whether serve starts its children as fresh interpreters or forks them from itself. For each process it
prints its kind, pid, RSS, PSS and USS (from /proc/<pid>/smaps_rollup: Rss, Pss, Private_Clean +
Private_Dirty), then the sums.

The target (<= 350 MiB for `--workers 2` with the cluster) is judged on the sum of PSS: each page shared by
k processes counts 1/k in each, so the sum is what the tree takes from the machine. The sum of RSS counts a
shared page once in every process that maps it (the cluster's forked processes share most of theirs, and
forked workers would share the supervisor's), so it over-counts by every sharer; it is printed beside it.
PSS also divides a page with processes outside the tree that map the same file (other servers run from the
same virtualenv share its libraries' pages), so on a busy machine the PSS sum reads a few MiB lower than on
a quiet one; the USS sum (pages of one process alone) is its floor.

Then the same server is given a fake OpenAI upstream in a process of its own (bench/compat.py
--serve-upstream, --tokens tokens a reply) as its provider, through PATCH /api/config by its admin, and
--requests requests are sent by --threads threads, half on keep-alive sessions and half on a fresh
connection each, cycling through a mix: /v1/chat/completions non-streaming and streaming (the admin's
dashboard token), /v1/models, /api/health, a chat session (created every fourth turn, a message posted and
its SSE stream read to the end, the sessions listed), a knowledge-base search (over one small document added
first; the dense signal is off unless --dense: the README's `pip install -e .` has no dense extra, and with
it each process that embeds loads its model once, a step, not growth), two dashboard API reads
(/api/auth/me, /api/usage), a 404 and a 401 (a bad Bearer token). After the
first 1,000 and at 2,500, 5,000, 7,500 and --requests, with the requests finished and 1 s idle, it reads each
worker's RSS and USS and prints them, with each worker's CPU seconds over the run (both must have served)
and the status counts; the verdict is RSS after --requests / RSS after 1,000 per worker, target <= 1.10.
`--json` also prints every figure as JSON.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from compat import ServeServer, _children, _cpu_of, machine, start_upstream  # noqa: E402 - same harness

TARGET_PSS_MIB = 350.0
TARGET_GROWTH = 1.10
CHECKPOINTS = (1000, 2500, 5000, 7500)


# --- the process tree, from /proc ---


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def comm(pid: int) -> str:
    return _read(f"/proc/{pid}/comm").strip()


def memory(pid: int) -> dict[str, float]:
    """RSS, PSS and USS of pid in MiB, from smaps_rollup (USS: the pages no other process maps)."""
    fields: dict[str, int] = {}
    for line in _read(f"/proc/{pid}/smaps_rollup").splitlines()[1:]:
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            fields[name] = int(parts[0])
    return {"rss": fields.get("Rss", 0) / 1024, "pss": fields.get("Pss", 0) / 1024,
            "uss": (fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)) / 1024}


def _says(pid: int) -> str | None:
    """What the process's command line or comm says it is, if it says."""
    text = f"{cmdline(pid)} {comm(pid)}".lower()
    for word, kind in (("qcluster", "cluster"), ("daphne", "worker"), ("sandbox", "sandbox")):
        if word in text:
            return kind
    return None


def _cluster_label(pid: int, depth: int) -> str:
    """The sentinel (the cluster's child), else a fork, with the role django-q2 writes into its title
    (setproctitle: `qcluster Process-<id> idle|busy|monitor|pusher`) when it does."""
    if depth == 1:
        return "qcluster sentinel"
    words = cmdline(pid).split()
    role = words[-1] if len(words) >= 3 and words[0] == "qcluster" and words[1].startswith("Process-") else ""
    role = "task worker" if role in ("idle", "busy") else role
    return f"qcluster fork ({role})" if role else "qcluster fork"


def walk(root: int) -> list[dict]:
    """Every process of root's tree, parents before children: pid, parent, kind and label.

    A direct child of the supervisor is the task cluster or a worker by what its command line or comm says,
    else by its depth (django-q2's cluster forks a sentinel that forks the task workers; a daphne worker has
    no child at rest, at most leaf ones); every process below a direct child belongs to that child's kind."""
    rows = [{"pid": root, "parent": None, "kind": "supervisor", "label": "serve (supervisor, timer)"}]
    for child in sorted(_children(root)):
        # django-q2's cluster is three deep (main, sentinel, its forks); a worker's own children (a sandbox
        # pool) are leaves: so a child with grandchildren is the cluster.
        kind = _says(child) or ("cluster" if any(_children(below) for below in _children(child)) else "worker")
        rows.append({"pid": child, "parent": root, "kind": kind,
                     "label": "qcluster (main)" if kind == "cluster" else "daphne worker" if kind == "worker"
                     else f"{kind} ({comm(child)})"})
        queue = [(child, 1)]
        while queue:
            pid, depth = queue.pop(0)
            for grandchild in sorted(_children(pid)):
                said = _says(grandchild)
                label = _cluster_label(grandchild, depth) if kind == "cluster" else \
                    f"{kind}'s child ({said or comm(grandchild)})"
                rows.append({"pid": grandchild, "parent": pid, "kind": kind, "label": label})
                queue.append((grandchild, depth + 1))
    return rows


def tree_memory(root: int) -> dict:
    rows = [{**row, **memory(row["pid"])} for row in walk(root)]
    rows = [row for row in rows if row["rss"] > 0]  # a process gone between the walk and its read
    totals = {key: sum(row[key] for row in rows) for key in ("rss", "pss", "uss")}
    by_kind: dict[str, dict[str, float]] = {}
    for row in rows:
        kind = by_kind.setdefault(row["kind"], {"processes": 0, "rss": 0.0, "pss": 0.0, "uss": 0.0})
        kind["processes"] += 1
        for key in ("rss", "pss", "uss"):
            kind[key] += row[key]
    return {"processes": rows, "totals": totals, "by_kind": by_kind}


def print_tree(title: str, figures: dict) -> None:
    print(f"\n{title}")
    print(f"  {'kind':<30}{'pid':>8}{'parent':>8}{'RSS':>9}{'PSS':>9}{'USS':>9}   (MiB)")
    for row in figures["processes"]:
        print(f"  {row['label']:<30}{row['pid']:>8}{row['parent'] or '':>8}"
              f"{row['rss']:>9.1f}{row['pss']:>9.1f}{row['uss']:>9.1f}")
    for kind, sums in figures["by_kind"].items():
        print(f"  {'sum, ' + kind + ' (' + str(sums['processes']) + ')':<46}"
              f"{sums['rss']:>9.1f}{sums['pss']:>9.1f}{sums['uss']:>9.1f}")
    totals = figures["totals"]
    print(f"  {'sum, whole tree (' + str(len(figures['processes'])) + ')':<46}"
          f"{totals['rss']:>9.1f}{totals['pss']:>9.1f}{totals['uss']:>9.1f}")
    verdict = "meets" if totals["pss"] <= TARGET_PSS_MIB else "misses"
    print(f"  PSS sum {totals['pss']:.1f} MiB {verdict} the target <= {TARGET_PSS_MIB:.0f} MiB "
          f"(RSS sum {totals['rss']:.1f} MiB counts each shared page once per sharer)")


# --- the mixed requests ---


class Mix:
    """The requests, one operation per call of `one(index)`; each counts as one HTTP request."""

    def __init__(self, base: str, token: str, stream_tokens: int):
        self.base, self.token = base, token
        self.auth = {"Authorization": f"Bearer {token}"}
        self.statuses: Counter[tuple[str, int]] = Counter()
        self.lock = threading.Lock()
        self.local = threading.local()
        self.body = {"model": "fake-model", "messages": [{"role": "user", "content": "Say something."}]}
        self.operations = [
            self.completion, self.completion_stream, self.models, self.health, self.chat, self.sessions,
            self.kb_search, self.me, self.usage, self.not_found, self.bad_token, self.completion,
        ]

    # Half the threads keep one connection alive, half open a new one each request (requests' module
    # functions make and close a session each call), so the kernel spreads connections over the workers.
    def _http(self):
        if getattr(self.local, "session", None) is None:
            self.local.session = requests.Session() if self.local.keep_alive else requests
        return self.local.session

    def _send(self, name: str, method: str, path: str, stream: bool = False, **kwargs) -> None:
        response = self._http().request(method, f"{self.base}{path}", timeout=60, stream=stream, **kwargs)
        with response:
            for _ in response.iter_content(65536):
                pass
        with self.lock:
            self.statuses[(name, response.status_code)] += 1

    def completion(self) -> None:
        self._send("v1 completion", "POST", "/v1/chat/completions", headers=self.auth, json=self.body)

    def completion_stream(self) -> None:
        self._send("v1 stream", "POST", "/v1/chat/completions", stream=True, headers=self.auth,
                   json={**self.body, "stream": True})

    def models(self) -> None:
        self._send("v1 models", "GET", "/v1/models", headers=self.auth)

    def health(self) -> None:
        self._send("health", "GET", "/api/health")

    def chat(self) -> None:
        turns = getattr(self.local, "turns", 0)
        if turns % 4 == 0:  # a new session every fourth turn: its creation is this operation's first request
            response = self._http().post(f"{self.base}/api/sessions", headers=self.auth, timeout=60,
                                         json={"name": "memory bench"})
            with self.lock:
                self.statuses[("session create", response.status_code)] += 1
            self.local.session_id = response.json()["id"]
        self.local.turns = turns + 1
        self._send("session chat (SSE)", "POST", f"/api/sessions/{self.local.session_id}/chat", stream=True,
                   headers=self.auth, json={"message": "Tell me something."})

    def sessions(self) -> None:
        self._send("session list", "GET", "/api/sessions", headers=self.auth)

    def kb_search(self) -> None:
        self._send("kb search", "POST", "/api/kb/search", headers=self.auth,
                   json={"query": "memory of the process tree", "topK": 5})

    def me(self) -> None:
        self._send("auth/me", "GET", "/api/auth/me", headers=self.auth)

    def usage(self) -> None:
        self._send("usage", "GET", "/api/usage", headers=self.auth)

    def not_found(self) -> None:
        self._send("404", "GET", "/api/no-such-thing", headers=self.auth)

    def bad_token(self) -> None:
        self._send("401", "GET", "/api/auth/me", headers={"Authorization": "Bearer not-a-token"})

    def requests_made(self) -> int:
        with self.lock:
            return sum(self.statuses.values())

    def run(self, until: int, threads: int) -> None:
        """Send requests on `threads` threads until `until` have been made in all (a chat turn may make two)."""
        counter = itertools.count()

        def worker(number: int) -> None:
            self.local.keep_alive = number % 2 == 0
            self.local.session = None
            while self.requests_made() < until:
                self.operations[next(counter) % len(self.operations)]()
            if self.local.session is not None and self.local.keep_alive:
                self.local.session.close()

        with ThreadPoolExecutor(threads) as pool:
            for future in [pool.submit(worker, number) for number in range(threads)]:
                future.result()


def setup(server: ServeServer, upstream: str) -> str:
    """The admin's dashboard token, the upstream made the provider, one small knowledge-base document."""
    token = server.login()
    headers = {"Authorization": f"Bearer {token}"}
    requests.patch(f"{server.base_url}/api/config", headers=headers, timeout=60, json={
        "provider": "openai", "base_url": upstream, "api_key": "sk-bench", "model": "fake-model",
    }).raise_for_status()
    text = " ".join(f"The process tree of a server holds memory; paragraph {n} says how much." for n in range(200))
    requests.post(f"{server.base_url}/api/kb/documents", headers=headers, timeout=60,
                  json={"filename": "memory.txt", "content": text}).raise_for_status()
    return token


def worker_pids(root: int) -> list[int]:
    return [row["pid"] for row in walk(root) if row["kind"] == "worker" and row["parent"] == root]


def growth(server: ServeServer, mix: Mix, total: int, threads: int) -> dict:
    workers = worker_pids(server.pid)
    cpu_before = {pid: _cpu_of(pid) for pid in workers}
    # Past 10,000 (a longer --requests), a mark every 5,000 more, so a slow trend shows.
    marks = [mark for mark in (*CHECKPOINTS, *range(10000, total, 5000)) if mark < total] + [total]
    samples: dict[int, dict[int, dict[str, float]]] = {}
    started = time.monotonic()
    print(f"\n{total} mixed requests on {threads} threads; each worker's memory (MiB) after each mark, 1 s idle")
    print(f"  {'requests':>9}{'s':>7}" + "".join(f"{'RSS ' + str(pid):>14}{'USS':>8}" for pid in workers))
    for mark in marks:
        mix.run(mark, threads)
        time.sleep(1.0)  # the requests' threads and connections given back
        samples[mark] = {pid: memory(pid) for pid in workers}
        print(f"  {mix.requests_made():>9}{time.monotonic() - started:>7.0f}"
              + "".join(f"{samples[mark][pid]['rss']:>14.1f}{samples[mark][pid]['uss']:>8.1f}" for pid in workers))
    first, last = samples[marks[0]], samples[marks[-1]]
    cpu = {pid: _cpu_of(pid) - cpu_before[pid] for pid in workers}
    ratios = {pid: last[pid]["rss"] / first[pid]["rss"] for pid in workers if first[pid]["rss"]}
    print("  each worker's CPU over the run: " + ", ".join(f"{pid}: {cpu[pid]:.1f} s" for pid in workers))
    print("  statuses: " + ", ".join(f"{name} {status}: {count}" for (name, status), count
                                     in sorted(mix.statuses.items())))
    for pid in workers:
        verdict = "meets" if ratios[pid] <= TARGET_GROWTH else "misses"
        print(f"  worker {pid}: RSS after {marks[-1]} / after {marks[0]} = {last[pid]['rss']:.1f} / "
              f"{first[pid]['rss']:.1f} = {ratios[pid]:.3f}, {verdict} the target <= {TARGET_GROWTH:.2f} "
              f"(USS {last[pid]['uss'] / first[pid]['uss']:.3f})")
    return {"workers": workers, "samples": {str(mark): {str(pid): figures for pid, figures in by_pid.items()}
                                            for mark, by_pid in samples.items()},
            "ratios": {str(pid): ratio for pid, ratio in ratios.items()},
            "cpu_seconds": {str(pid): seconds for pid, seconds in cpu.items()},
            "statuses": {f"{name} {status}": count for (name, status), count in mix.statuses.items()},
            "seconds": time.monotonic() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2, help="serve's --workers")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="idle wait before the tree is read")
    parser.add_argument("--requests", type=int, default=10000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=20, help="tokens of each fake upstream reply")
    parser.add_argument("--idle-only", action="store_true", help="only the idle tree")
    parser.add_argument("--dense", action="store_true", help="leave the dense knowledge-base signal on when its "
                        "extra is installed (default: AGENTSITE_KB_DENSE=false, as the README's install has no extra)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="more of serve's environment (repeatable), e.g. MALLOC_ARENA_MAX=2")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    print(f"machine: {machine()}")
    results: dict = {}
    upstream = None
    env = {} if args.dense else {"AGENTSITE_KB_DENSE": "false"}
    env.update(item.split("=", 1) for item in args.env)
    server = ServeServer(args.workers, env).start()
    try:
        print(f"serve --workers {args.workers}, pid {server.pid}, {server.base_url}, data dir {server.data_dir}, "
              f"dense signal {'on where installed' if args.dense else 'off'}; env {env}")
        time.sleep(args.idle_seconds)
        results["idle"] = tree_memory(server.pid)
        print_tree(f"idle tree, {args.idle_seconds:g} s after /api/health answered "
                   f"(load average {os.getloadavg()[0]:.2f})", results["idle"])
        if not args.idle_only:
            upstream, base_url = start_upstream(args.tokens)
            mix = Mix(server.base_url, setup(server, base_url), args.tokens)
            results["growth"] = growth(server, mix, args.requests, args.threads)
            results["after"] = tree_memory(server.pid)
            print_tree(f"the tree after {args.requests} requests (load average {os.getloadavg()[0]:.2f})",
                       results["after"])
    finally:
        server.stop()
        if upstream is not None:
            upstream.terminate()
            upstream.wait(10)
    results["load_average"] = os.getloadavg()
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

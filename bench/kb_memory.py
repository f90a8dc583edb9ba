"""Knowledge base memory: what daphne holds after many users add documents and search them.

    /work/main/.venv/bin/python bench/kb_memory.py [--root CHECKOUT] [--users 8] [--text-mb 12]
        [--cache-mb N] [--quota-mb N]

Starts daphne from a checkout (default: this one; pass an older one to compare) on a temporary data dir
and SQLite database, registers `--users` accounts over HTTP, and has each add `--text-mb` MB of text
(documents of at most 4 MB, `bench/kb.py`'s Zipf corpus) and then search its knowledge base twice. Prints
daphne's resident memory (VmRSS from /proc) after start, after the adds, after every user has searched,
and after a second round of searches, plus the search latencies (the first search of a user builds its
matrix). `--cache-mb` sets AGENTSITE_KB_INDEX_CACHE_MB (checkouts without it ignore it); the quota is off
(AGENTSITE_KB_QUOTA_MB=0) unless `--quota-mb` is given, so that every checkout stores the same documents.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from kb import Corpus  # noqa: E402 - the same corpus as the ingest and search benchmark

DOCUMENT_CHARS = 4_000_000
PREPARE = ("import django; django.setup(); from django.core.management import call_command; "
           "call_command('migrate', interactive=False, verbosity=0)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


class Daphne:
    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root, self.data_dir, self.port = root, Path(tempfile.mkdtemp(prefix="agentsite-kbmem-")), free_port()
        self.env = {**{k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")},
                    "AGENTSITE_DATA_DIR": str(self.data_dir), "DJANGO_SETTINGS_MODULE": "agentsite.settings",
                    "AGENTSITE_LOG_LEVEL": "WARNING", "AGENTSITE_REGISTER_RATE_LIMIT": "100000",
                    "AGENTSITE_LOGIN_RATE_LIMIT": "100000", "PYTHONPATH": str(root), **env}
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Daphne:
        subprocess.run([sys.executable, "-c", PREPARE], cwd=self.root, env=self.env, check=True)
        self.proc = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port),
                                      "agentsite.asgi:application"], cwd=self.root, env=self.env,
                                     stdout=subprocess.DEVNULL, stderr=(self.data_dir / "daphne.log").open("wb"))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                requests.get(f"{self.base}/api/health", timeout=10)
                return self
            except (requests.ConnectionError, requests.Timeout):
                time.sleep(0.2)  # polling for a port to open, with a deadline
        raise RuntimeError("daphne did not answer within 60 s")

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def rss(self) -> float:
        return rss_mib(self.proc.pid)


def register(base: str, name: str) -> dict[str, str]:
    response = requests.post(f"{base}/api/auth/register", timeout=30,
                             json={"username": name, "password": "a-long-fine-password"})
    response.raise_for_status()
    return {"Authorization": f"Bearer {response.json()['token']}"}


def timed_search(base: str, headers: dict[str, str], query: str) -> float:
    started = time.perf_counter()
    response = requests.post(f"{base}/api/kb/search", json={"query": query, "topK": 5}, headers=headers, timeout=120)
    response.raise_for_status()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=HERE.parent, help="the checkout daphne runs from")
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--text-mb", type=float, default=12.0, help="MB of text each user adds")
    parser.add_argument("--cache-mb", type=int, default=None, help="AGENTSITE_KB_INDEX_CACHE_MB")
    parser.add_argument("--quota-mb", type=int, default=0, help="AGENTSITE_KB_QUOTA_MB (0: off)")
    args = parser.parse_args()
    env = {"AGENTSITE_KB_QUOTA_MB": str(args.quota_mb)}
    if args.cache_mb is not None:
        env["AGENTSITE_KB_INDEX_CACHE_MB"] = str(args.cache_mb)
    corpus = Corpus()
    chars = int(args.text_mb * 1e6)
    with Daphne(args.root.resolve(), env) as server:
        users = [register(server.base, f"user{number}") for number in range(args.users)]
        timed_search(server.base, users[0], "warm up")
        figures = {"after start": server.rss()}
        refused = 0
        for headers in users:
            for start in range(0, chars, DOCUMENT_CHARS):
                text = corpus.document(min(DOCUMENT_CHARS, chars - start))
                response = requests.post(f"{server.base}/api/kb/documents", headers=headers, timeout=300,
                                         json={"filename": f"doc{start}.txt", "content": text})
                refused += response.status_code == 413
                if response.status_code not in (201, 413):
                    raise RuntimeError(f"adding a document answered {response.status_code}: {response.text[:300]}")
        figures["after the adds"] = server.rss()
        first = [timed_search(server.base, headers, corpus.query()) for headers in users]
        figures["after every user searched once"] = server.rss()
        second = [timed_search(server.base, headers, corpus.query()) for headers in users]
        figures["after a second round"] = server.rss()
    print(f"root {args.root} | {args.users} users x {args.text_mb} MB of text | env {env} | 413 refusals: {refused}")
    for label, mib in figures.items():
        print(f"  daphne RSS {label}: {mib:.0f} MiB")
    print(f"  search, first round: median {statistics.median(first) * 1000:.0f} ms, max {max(first) * 1000:.0f} ms; "
          f"second round: median {statistics.median(second) * 1000:.0f} ms, max {max(second) * 1000:.0f} ms")


if __name__ == "__main__":
    main()

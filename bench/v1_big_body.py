"""What a large, legal-sized /v1 body costs the worker that reads it: how long /api/health waits on that worker
while the body is parsed, and what an unauthenticated one costs before its 401.

    python bench/v1_big_body.py            # starts a one-process daphne server itself (SQLite)

For each door (chat completions, responses, messages, count_tokens, embeddings) it posts a body just under the
10 MB limit made of many tiny messages (or embedding inputs), then a legal chat body at the message limit
(2,048 messages of ~5 KB), and meanwhile asks /api/health every 20 ms on the same (single) process: it prints
the big request's status and time and the slowest health answer during it (the upstream is a refused port: a
request that passes validation ends 502). Then, under `compat_auth: key`, a 10 MB body with no credential: the
time to its 401 and the server's CPU seconds for it (schedstat of every thread of the server process).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.server import LiveServer, refusing_port  # noqa: E402

LIMIT = 10 * 1024 * 1024


def _cpu_of(pid: int) -> float:
    return sum(int((task / "schedstat").read_text().split()[0]) for task in Path(f"/proc/{pid}/task").iterdir()
               if (task / "schedstat").exists()) / 1e9


def _many(make, limit: int = LIMIT - 4096) -> list:
    one = max(len(json.dumps(make(0))), len(json.dumps(make(1)))) + 2
    return [make(i) for i in range(limit // one - 64)]


def bodies() -> dict[str, dict]:
    messages = _many(lambda i: {"role": "user", "content": "x"})
    anthropic = _many(lambda i: {"role": "user" if i % 2 == 0 else "assistant", "content": "x"})
    items = _many(lambda i: {"role": "user", "content": "x"})
    return {
        "/v1/chat/completions": {"model": "fake-model", "messages": messages},
        "/v1/responses": {"model": "fake-model", "input": items},
        "/v1/messages": {"model": "fake-model", "max_tokens": 5, "messages": anthropic},
        "/v1/messages/count_tokens": {"model": "fake-model", "messages": anthropic},
        "/v1/embeddings": {"model": "hash-256", "input": _many(lambda i: "x")},
    }


def while_posting(base: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, float, float, int]:
    """(status, seconds of the big request, slowest /api/health during it, health answers)."""
    done = threading.Event()
    slowest, answers = [0.0], [0]

    def probe() -> None:
        with requests.Session() as session:
            while not done.is_set():
                started = time.perf_counter()
                session.get(f"{base}/api/health", timeout=60)
                slowest[0] = max(slowest[0], time.perf_counter() - started)
                answers[0] += 1
                done.wait(0.02)

    prober = threading.Thread(target=probe)
    started = time.perf_counter()
    prober.start()
    response = requests.post(f"{base}{path}", data=body, timeout=120,
                             headers={"Content-Type": "application/json", **headers})
    took = time.perf_counter() - started
    done.set()
    prober.join()
    return response.status_code, took, slowest[0], answers[0]


def main() -> None:
    server = LiveServer(command="daphne", env={"AGENTSITE_LOGIN_RATE_LIMIT": "1000"}).start()
    try:
        admin = {"Authorization": f"Bearer {server.login()['token']}"}
        requests.patch(f"{server.base_url}/api/config", headers=admin, timeout=10, json={
            "provider": "openai", "base_url": f"http://127.0.0.1:{refusing_port()}/v1", "api_key": "sk-x",
            "model": "fake-model"}).raise_for_status()
        print(f"{'door':28} {'bytes':>9} {'status':>6} {'took s':>7} {'worst health s':>15} {'answers':>7}")
        cases = [(path, path, body) for path, body in bodies().items()]
        text = "word " * ((LIMIT - 65536) // 2048 // 5 - 20)  # a legal body: 2,048 messages (the limit) of ~5 KB
        cases.append(("chat, 2,048 x 5 KB", "/v1/chat/completions",
                      {"model": "fake-model", "messages": [{"role": "user", "content": text}] * 2048}))
        for label, path, body in cases:
            raw = json.dumps(body).encode()
            status, took, worst, answers = while_posting(server.base_url, path, raw, {})
            print(f"{label:28} {len(raw):9d} {status:6d} {took:7.2f} {worst:15.3f} {answers:7d}")
        requests.patch(f"{server.base_url}/api/config", headers=admin, timeout=10,
                       json={"compat_auth": "key"}).raise_for_status()
        raw = json.dumps(bodies()["/v1/chat/completions"]).encode()
        for _ in range(2):
            before = _cpu_of(server.proc.pid)
            started = time.perf_counter()
            response = requests.post(f"{server.base_url}/v1/chat/completions", data=raw, timeout=120,
                                     headers={"Content-Type": "application/json"})
            took = time.perf_counter() - started
            print(f"unauthenticated 10 MB under compat_auth key: {response.status_code} in {took:.3f} s, "
                  f"server CPU {_cpu_of(server.proc.pid) - before:.3f} s")
    finally:
        server.stop()


if __name__ == "__main__":
    main()

"""Metrics and JSON logs on a real `serve --workers 2` (issue 28, items 1 and 4): one scrape sees every worker's
requests (prometheus_client's multiprocess files under the data directory, emptied when serve starts), the
token guards the scrape, every answer carries X-Request-Id, and every log line is one JSON object with the
request id, daphne's access log included."""

from __future__ import annotations

import json
import socket
import uuid

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e import poll
from tests.server import LiveServer

pytestmark = pytest.mark.e2e

TOKEN = "scrape-token-5d1e0b77"


@pytest.fixture(scope="module")
def server():
    live = LiveServer(workers=2, env={"AGENTSITE_METRICS": "1", "AGENTSITE_METRICS_TOKEN": TOKEN,
                                      "AGENTSITE_LOG_FORMAT": "json", "AGENTSITE_WORKER_HEADER": "1"})
    # A file a previous run left: serve empties the directory, so it is never summed in.
    stale = live.data_dir / "metrics" / socket.gethostname()
    stale.mkdir(parents=True, exist_ok=True)
    (stale / "counter_999999.db").write_bytes(b"not a metrics file")
    live.start()
    try:
        yield live
    finally:
        live.stop()


def get(server: LiveServer, path: str, **headers) -> requests.Response:
    return requests.get(f"{server.base_url}{path}", timeout=20, headers={"Connection": "close", **headers})


def scrape(server: LiveServer) -> dict[tuple[str, frozenset], float]:
    response = get(server, "/metrics", Authorization=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.text
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(response.text) for sample in family.samples}


def health_count(samples) -> float:
    return samples.get(("agentsite_http_requests_total",
                        frozenset({"route": "/api/health", "method": "GET", "status": "200"}.items())), 0.0)


def health_from_both_workers(server) -> int:
    """Send /api/health until both workers have answered (at least 6 requests); returns how many were sent."""
    workers: set[str] = set()
    sent = 0

    def both_answered() -> bool:
        nonlocal sent
        response = get(server, "/api/health")
        assert response.status_code == 200
        sent += 1
        workers.add(response.headers["X-Agentsite-Worker"])
        return len(workers) == 2 and sent >= 6

    poll(both_answered, "both workers answered a request", timeout=60, every=0)
    return sent


def test_one_scrape_sums_every_worker(server):
    assert not (server.data_dir / "metrics" / socket.gethostname() / "counter_999999.db").exists()
    assert get(server, "/metrics").status_code == 401
    before = health_count(scrape(server))
    sent = health_from_both_workers(server)
    # Whichever worker answers the scrape, it counts the other's requests too.
    for _ in range(4):
        assert health_count(scrape(server)) - before == sent


def test_the_health_strip_summary_sums_every_worker_too(server):
    admin = {"Authorization": f"Bearer {server.login()['token']}"}

    def summary() -> dict:
        response = get(server, "/api/metrics/summary", **admin)
        assert response.status_code == 200, response.text
        return response.json()

    before = summary()
    assert before["enabled"] is True
    sent = health_from_both_workers(server)
    # Whichever worker answers, it counts the other's requests, and never the summaries asked meanwhile.
    for _ in range(4):
        after = summary()
        assert after["requests"] - before["requests"] == sent
        assert after["errors"] == before["errors"]


def test_request_ids_and_json_log_lines(server):
    offered = f"client-{uuid.uuid4().hex}"
    response = get(server, "/api/no-such-thing", **{"X-Request-Id": offered})
    assert response.status_code == 404
    assert response.headers["X-Request-Id"] == offered
    assert response.json()["error"]["request_id"] == offered
    # A malformed id is replaced by a new one.
    replaced = get(server, "/api/health", **{"X-Request-Id": "bad id with spaces"})
    assert replaced.headers["X-Request-Id"] != "bad id with spaces" and len(replaced.headers["X-Request-Id"]) == 32
    generated = get(server, "/api/health").headers["X-Request-Id"]

    def access_line_for(request_id: str):
        for line in server.log_path.read_text(errors="replace").splitlines():
            if request_id in line and '"daphne.access"' in line:
                return json.loads(line)
        return None

    entry = poll(lambda: access_line_for(offered), "daphne's access log line with the request id", timeout=10)
    assert entry["request_id"] == offered and entry["status"] == 404 and entry["path"] == "/api/no-such-thing"
    assert poll(lambda: access_line_for(generated), "the generated id in the access log", timeout=10)
    # Every line the server processes wrote since serve said it serves is one JSON object (serve's own console
    # messages, which start with `agentsite:`, aside: they are its terminal output, not log records).
    log = server.log_path.read_text(errors="replace").splitlines()
    start = next(index for index, line in enumerate(log) if line.startswith("agentsite: serving on"))
    lines = [line for line in log[start:] if line.strip() and not line.startswith("agentsite:")]
    assert lines
    assert [line for line in lines if not _json_object(line)] == []


def _json_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False

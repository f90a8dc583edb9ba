"""A run waiting for an approval across a full restart of `serve` (daphne and the task cluster stopped, then
started again on the same data): it is still `waiting` (not swept as crashed: no process holds it), its
approval is still pending, and once approved the restarted task cluster resumes it to the end."""

from __future__ import annotations

import pytest
import requests

from tests.e2e import poll
from tests.server import LiveServer
from tests.workflows.conftest import graph, node

pytestmark = pytest.mark.e2e

GATED = graph(node("in", "input"), node("ask", "approval", prompt="Ship ${in}?", timeout_s=3600),
              node("shout", "code", code="return input.decision + ' by ' + input.by + ': ' + context.input;"),
              node("out", "output"), edges=[("in", "ask"), ("ask", "shout"), ("shout", "out")])


def test_a_waiting_run_survives_a_full_restart_and_resumes_on_the_restarted_cluster():
    server = LiveServer().start()
    try:
        headers = {"Authorization": f"Bearer {server.login()['token']}"}

        def api(method: str, path: str, **kwargs):
            return requests.request(method, f"{server.base_url}{path}", headers=headers, timeout=30, **kwargs)

        workflow = api("POST", "/api/workflows", json={"name": "gated", **GATED}).json()
        run = api("POST", f"/api/workflows/{workflow['id']}/run", json={"input": "v2"}).json()
        assert run["status"] == "waiting", run

        server.stop(drop_database=False)
        assert server.proc is not None and server.proc.poll() is not None
        server.start()
        headers = {"Authorization": f"Bearer {server.login()['token']}"}

        stored = api("GET", f"/api/workflows/runs/{run['id']}").json()
        assert stored["status"] == "waiting" and stored["error"] is None, stored
        [approval] = api("GET", "/api/approvals").json()["results"]
        assert (approval["run_id"], approval["prompt"], approval["status"]) == (run["id"], "Ship v2?", "pending")
        decided = api("POST", f"/api/approvals/{approval['id']}", json={"decision": "approve"})
        assert decided.status_code == 200, decided.text
        url = f"/api/workflows/runs/{run['id']}"
        finished = poll(lambda: (found := api("GET", url).json())["status"] not in ("waiting", "queued", "running")
                        and found, "the restarted cluster resumed the approved run", timeout=60)
        assert (finished["status"], finished["output"]) == ("success", "approve by admin: v2"), finished
        again = api("POST", f"/api/approvals/{approval['id']}", json={"decision": "reject"})
        assert again.status_code == 409
    finally:
        server.stop()

"""How a run that did not succeed is stored: `error` with its cause whenever the server stopped it (a stream
it failed to send, a time limit), `cancelled` only for a client that hung up (tests/workflows/test_e2e.py)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async

from tests.workflows.conftest import graph, node
from workflows.models import WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True)

# The delay outlasts any test: the run ends only because the stream failing stops it.
WAITS = graph(node("in", "input"), node("wait", "delay", delayMs=600_000), node("out", "output"),
              edges=[("in", "wait"), ("wait", "out")])


def events_of(body: str) -> list[tuple[str, Any]]:
    found = []
    for block in body.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
        if "data" in lines:
            found.append((lines.get("event", "message"), json.loads(lines["data"])))
    return found


async def stream_run(user: Any, workflow_id: Any, text: str) -> httpx.Response:
    from accounts.tokens import token_pair_for
    from agentsite.asgi import application

    token = (await sync_to_async(token_pair_for)(user))["token"]
    transport = httpx.ASGITransport(app=application, client=("127.0.0.1", 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=10) as client:
        return await client.post(f"/api/workflows/{workflow_id}/run", json={"input": text, "stream": True},
                                 headers={"Authorization": f"Bearer {token}"})


async def test_a_stream_that_fails_on_the_server_stores_the_run_as_error_with_its_cause(owner, monkeypatch):
    from workflows import api
    from workflows.services import workflow_create

    workflow = await sync_to_async(workflow_create)(owner=owner, name="waits", **WAITS)
    encode = api.sse_event

    def failing(data: Any, event: str | None = None) -> bytes:
        if event == "node_started" and data == {"node": "wait"}:  # a server bug: an event it cannot send
            raise TypeError("Object of type Thing is not JSON serializable")
        return encode(data, event)

    monkeypatch.setattr(api, "sse_event", failing)
    response = await stream_run(owner, workflow.pk, "hello")

    events = events_of(response.text)
    assert [name for name, _ in events] == ["run_started", "node_started", "node_finished", "error"], events
    assert events[-1][1]["code"] == "internal_error"
    # The dashboard shows "The run failed: <message>": the message does not say it again.
    assert not events[-1][1]["message"].lower().startswith("the run failed")
    # Stored before the error event was sent: a client reading the run then finds it finished.
    run = await sync_to_async(WorkflowRun.objects.get)(pk=events[0][1]["run_id"])
    assert run.status == WorkflowRun.ERROR, (run.status, run.error)
    assert run.error["node"] is None and "TypeError" in run.error["message"]
    assert [(entry["node"], entry["status"]) for entry in run.trace] == [("in", "success"), ("wait", "cancelled")]
    assert run.outputs == {"in": "hello"} and run.finished_at is not None


async def test_a_workflow_tool_past_its_time_limit_is_stored_as_error_not_cancelled(owner, monkeypatch):
    from agentsite.agent.tools import ToolContext, registry
    from workflows import runs
    from workflows.services import workflow_create

    await sync_to_async(workflow_create)(owner=owner, name="waits", **WAITS)
    monkeypatch.setattr(runs, "TOOL_TIME_LIMIT_S", 0.2)  # the delay node waits 600 s

    result = await registry.call("workflow__waits", {"input": "hello"}, ToolContext(user_id=owner.pk))

    run = await sync_to_async(WorkflowRun.objects.get)(workflow__name="waits")
    assert result.is_error, result.text
    assert run.status == WorkflowRun.ERROR and run.error["node"] is None, (run.status, run.error)
    assert [(entry["node"], entry["status"]) for entry in run.trace] == [("in", "success"), ("wait", "cancelled")]

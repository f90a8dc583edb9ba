"""A workflow run acts as who started it: an API key's run counts to that key, and a key without the `admin`
scope never reaches an admin's tools through a workflow, whether the run is sync, queued or started from /v1.

The probe is a tool reserved for admins that records the caller it ran for (the registry offers it only to a
caller acting as an admin) and the usage caller of the task it ran in.
"""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from agentsite.agent.tools import Tool, ToolContext, ToolResult, ToolSource, registry
from agentsite.agent.usage import current_caller
from tests.conftest import client_for
from tests.workflows.conftest import graph, node
from workflows import tasks
from workflows.models import WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True)


class ProbeSource(ToolSource):
    name = "probe"

    def __init__(self) -> None:
        self.calls: list[tuple[int | None, bool | None, str]] = []

    async def list_tools(self, ctx: ToolContext) -> list[Tool]:
        async def call(arguments: dict, called: ToolContext) -> ToolResult:
            caller = current_caller()
            self.calls.append((called.user_id, called.is_admin, caller.key_id if caller else ""))
            return ToolResult.of_text("admin tool ran")

        return [Tool("admin_probe", "Admins only.", {"type": "object"}, call, source=self.name)]


@pytest.fixture
def probe(settings):
    settings.AGENTSITE_ADMIN_ONLY_TOOLS = ["admin_probe"]
    source = ProbeSource()
    registry.register_source(source)
    yield source
    registry.unregister_source(source.name)


@pytest.fixture
def workflow(admin):
    answer = client_for(admin).post("/api/workflows", {"name": "probing", **graph(
        node("in", "input"), node("probe", "tool", toolName="admin_probe"), node("out", "output"),
        edges=[("in", "probe"), ("probe", "out")])}, format="json")
    assert answer.status_code == 201, answer.content
    return answer.json()


def key_client(user, scopes: list[str]) -> tuple[APIClient, str]:
    made = client_for(user).post("/api/keys", {"name": "k", "scopes": scopes}, format="json").json()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {made['key']}")
    return client, str(made["id"])


def test_an_admins_own_token_runs_the_admin_tool(admin, probe, workflow):
    run = client_for(admin).post(f"/api/workflows/{workflow['id']}/run", {"input": "x"}, format="json").json()
    assert run["status"] == "success", run
    assert probe.calls == [(admin.pk, True, "")]


@pytest.mark.parametrize("scopes", [["api"], ["api", "admin"]])
def test_a_key_runs_the_workflow_as_itself_with_the_admin_tool_only_with_the_admin_scope(admin, probe, workflow,
                                                                                        scopes):
    client, key_id = key_client(admin, scopes)
    run = client.post(f"/api/workflows/{workflow['id']}/run", {"input": "x"}, format="json").json()
    stored = WorkflowRun.objects.get(pk=run["id"])
    assert stored.acting_key == key_id
    if "admin" in scopes:
        assert run["status"] == "success", run
        assert probe.calls == [(admin.pk, True, key_id)]  # the run's calls count to the key
        assert stored.admin_rights is None
    else:
        assert run["status"] == "error" and "admin_probe" in run["error"]["message"], run
        assert probe.calls == []
        assert stored.admin_rights is False


def test_a_queued_run_keeps_its_keys_rights_in_the_worker(admin, probe, workflow):
    client, key_id = key_client(admin, ["api"])
    queued = client.post(f"/api/workflows/{workflow['id']}/run", {"input": "x", "async": True}, format="json")
    assert queued.status_code == 202, queued.content
    # The worker has no request: what it knows of the caller is what the run recorded.
    tasks.workflow_run_task(queued.json()["id"])
    stored = WorkflowRun.objects.get(pk=queued.json()["id"])
    assert (stored.status, stored.acting_key, stored.admin_rights) == ("error", key_id, False)
    assert "admin_probe" in stored.error["message"] and probe.calls == []


def test_a_v1_workflow_model_acts_as_the_key(admin, probe, workflow):
    client, key_id = key_client(admin, ["v1"])
    answer = client.post("/v1/chat/completions", {"model": "workflow:probing", "messages": [
        {"role": "user", "content": "x"}]}, format="json")
    assert answer.status_code == 502 and "admin_probe" in answer.json()["error"]["message"], answer.content
    assert probe.calls == []
    assert WorkflowRun.objects.get().acting_key == key_id
    admin_client, admin_key = key_client(admin, ["v1", "admin"])
    answer = admin_client.post("/v1/chat/completions", {"model": "workflow:probing", "messages": [
        {"role": "user", "content": "x"}]}, format="json")
    assert answer.status_code == 200, answer.content
    assert probe.calls == [(admin.pk, True, admin_key)]


async def test_the_agent_without_admin_rights_runs_a_workflow_tool_without_them(admin, probe, workflow):
    # The agent of a key without the admin scope: its tool context is resolved to is_admin False.
    refused = await registry.call("workflow__probing", {"input": "x"}, ToolContext(user_id=admin.pk, is_admin=False))
    assert refused.is_error and "admin_probe" in refused.text and probe.calls == []
    allowed = await registry.call("workflow__probing", {"input": "x"}, ToolContext(user_id=admin.pk, is_admin=True))
    assert not allowed.is_error and probe.calls == [(admin.pk, True, "")]


def test_a_user_the_workflow_is_shared_with_runs_it_with_his_rights_not_the_admin_owners(admin, probe, workflow,
                                                                                         other_user):
    shared = client_for(admin).put(f"/api/workflows/{workflow['id']}/access", {
        "visibility": "shared", "grants": [{"user": other_user.pk, "role": "viewer"}]}, format="json")
    assert shared.status_code == 200, shared.content
    run = client_for(other_user).post(f"/api/workflows/{workflow['id']}/run", {"input": "x"}, format="json").json()
    assert run["status"] == "error" and "admin_probe" in run["error"]["message"], run
    assert probe.calls == []  # the admin tool is the owner's right, not the run's
    assert WorkflowRun.objects.get(pk=run["id"]).owner_id == other_user.pk
    mine = client_for(admin).post(f"/api/workflows/{workflow['id']}/run", {"input": "x"}, format="json").json()
    assert mine["status"] == "success" and probe.calls == [(admin.pk, True, "")]

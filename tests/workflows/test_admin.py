"""The Django admin's pages for approvals, triggers and versions (issue 31): an operator opens each changelist
and change page; versions and approvals are read only; a trigger is edited as the API would check it; a
trigger's secret and nonce appear on no admin page."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from tests.workflows.conftest import graph, node
from workflows.models import WorkflowApproval, WorkflowRun, WorkflowTrigger, WorkflowVersion

pytestmark = pytest.mark.django_db

ECHO = graph(node("in", "input"), node("out", "output"), edges=[("in", "out")])


@pytest.fixture
def staff(admin) -> Client:
    client = Client()
    client.force_login(admin)
    return client


@pytest.fixture
def made(owner, other_user, owner_client) -> dict:
    """A workflow with two versions, a trigger (its secret as the API showed it once), a waiting run with a
    pending approval and a decided one."""
    workflow = owner_client.post("/api/workflows", {"name": "echo", **ECHO}, format="json").json()
    assert owner_client.patch(f"/api/workflows/{workflow['id']}", {"description": "v2"},
                              format="json").status_code == 200
    trigger = owner_client.post(f"/api/workflows/{workflow['id']}/triggers", {}, format="json").json()
    run = WorkflowRun.objects.create(workflow_id=workflow["id"], owner=owner, status=WorkflowRun.WAITING)
    pending = WorkflowApproval.objects.create(run=run, node_id="ok", node_name="sign off", prompt="Ship it?")
    pending.approvers.add(owner, other_user)
    decided = WorkflowApproval.objects.create(run=run, node_id="ok2", node_name="second look",
                                              status=WorkflowApproval.APPROVED, decided_by=owner)
    decided.approvers.add(owner)
    return {"workflow": workflow, "trigger": trigger, "run": run, "pending": pending, "decided": decided,
            "version": WorkflowVersion.objects.get(workflow_id=workflow["id"], number=1),
            "nonce": WorkflowTrigger.objects.get(pk=trigger["id"]).nonce}


def pages(made: dict) -> dict[str, str]:
    base = "/admin/workflows"
    trigger, pending, version = made["trigger"]["id"], made["pending"].pk, made["version"].pk
    return {
        "triggers": f"{base}/workflowtrigger/", "trigger": f"{base}/workflowtrigger/{trigger}/change/",
        "trigger history": f"{base}/workflowtrigger/{trigger}/history/",
        "trigger delete": f"{base}/workflowtrigger/{trigger}/delete/",
        "triggers filtered": f"{base}/workflowtrigger/?enabled__exact=1&mode__exact=sync",
        "approvals": f"{base}/workflowapproval/", "approval": f"{base}/workflowapproval/{pending}/change/",
        "approvals filtered": f"{base}/workflowapproval/?status__exact=pending&approvers__id__exact="
                              f"{made['pending'].approvers.order_by('pk').first().pk}",
        "versions": f"{base}/workflowversion/", "version": f"{base}/workflowversion/{version}/change/",
    }


def test_each_changelist_and_change_page_opens_and_shows_what_an_operator_looks_for(staff, made):
    html = {}
    for name, path in pages(made).items():
        response = staff.get(path)
        assert response.status_code == 200, (name, response.status_code)
        html[name] = response.content.decode()
    assert "/hooks/" + made["trigger"]["id"] in html["trigger"]
    assert "owner" in html["triggers"] and "echo" in html["triggers"]
    assert "sign off" in html["approvals"] and "other, owner" in html["approvals"]
    assert "sign off" in html["approvals filtered"] and "second look" not in html["approvals filtered"]
    assert "Ship it?" in html["approval"]
    for name, model in (("approvals", "workflowapproval"), ("versions", "workflowversion")):
        # records: no add button, no bulk delete
        assert f"/{model}/add/" not in html[name] and "delete_selected" not in html[name], name
    for name in ("approval", "version"):  # read only: no form to save
        assert 'name="_save"' not in html[name], name


def test_a_triggers_secret_and_nonce_appear_on_no_admin_page(staff, made):
    secret, nonce = made["trigger"]["secret"], made["nonce"]
    for name, path in pages(made).items():
        page = staff.get(path).content.decode()
        assert secret not in page and nonce not in page, name
        assert secret[len("whsec_"):][:16] not in page, name
    # Not searchable either: a search by the nonce is no oracle for it.
    found = staff.get(f"/admin/workflows/workflowtrigger/?q={nonce}").content.decode()
    assert made["trigger"]["id"] not in found
    assert "0 results" in found


def test_a_trigger_is_edited_as_the_api_checks_it_and_refuses_at_once(staff, made):
    trigger = made["trigger"]
    path = pages(made)["trigger"]
    form = {"enabled": "", "mode": "async", "version": "", "rate_per_minute": "5"}
    saved = staff.post(path, form)
    assert saved.status_code == 302, saved.content.decode()[:2000]
    stored = WorkflowTrigger.objects.get(pk=trigger["id"])
    assert (stored.enabled, stored.mode, stored.rate_per_minute, stored.nonce) == (False, "async", 5, made["nonce"])
    refused = APIClient().post(f"/hooks/{trigger['id']}", b'"hi"', content_type="application/json",
                               HTTP_AUTHORIZATION=f"Bearer {trigger['secret']}")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "trigger_disabled"

    bad = staff.post(path, {**form, "version": "9"})
    assert bad.status_code == 200 and "The workflow has no version 9." in bad.content.decode()
    assert WorkflowTrigger.objects.get(pk=trigger["id"]).version is None
    assert staff.get("/admin/workflows/workflowtrigger/add/").status_code == 403


def test_records_are_not_edited_and_a_pending_approval_goes_only_with_its_run(staff, made):
    version_path = pages(made)["version"]
    assert staff.post(version_path, {"note": "changed"}).status_code == 403
    assert WorkflowVersion.objects.get(pk=made["version"].pk).note != "changed"
    assert staff.get(version_path.replace("/change/", "/delete/")).status_code == 403
    assert staff.get(f"/admin/workflows/workflowapproval/{made['pending'].pk}/delete/").status_code == 403
    decided_delete = f"/admin/workflows/workflowapproval/{made['decided'].pk}/delete/"
    assert staff.post(decided_delete, {"post": "yes"}).status_code == 302
    assert not WorkflowApproval.objects.filter(pk=made["decided"].pk).exists()
    # A waiting run is deleted with its pending approval: the cascade is allowed.
    run_delete = f"/admin/workflows/workflowrun/{made['run'].pk}/delete/"
    assert staff.post(run_delete, {"post": "yes"}).status_code == 302
    assert not WorkflowApproval.objects.exists() and not WorkflowRun.objects.exists()

"""Approvals in a real browser (at 375 and 1280 px): a run waiting for the logged-in user shows as a pending
approval on the Workflows page with a count on the Workflows link; Approve resumes the run (the task cluster
of `serve` runs it on), Reject takes the other branch; the editor's run panel shows a streamed run that
stops waiting."""

from __future__ import annotations

import pytest
import requests
from playwright.sync_api import expect

from tests.dashboard.conftest import DESKTOP, PHONE
from tests.e2e import poll

pytestmark = pytest.mark.e2e

LIVE_SERVER_COMMAND = "serve"  # a decision queues the run again: the task cluster resumes it

GATED = {
    "nodes": [
        {"id": "in", "type": "input", "name": "in", "config": {}, "position": {"x": 40, "y": 60}},
        {"id": "ask", "type": "approval", "name": "ask", "config": {"prompt": "Publish ${in}?"},
         "position": {"x": 260, "y": 60}},
        {"id": "out", "type": "output", "name": "out", "config": {"outputFormat": "json"},
         "position": {"x": 480, "y": 60}}],
    "edges": [{"from": "in", "to": "ask"}, {"from": "ask", "to": "out"}]}


@pytest.fixture
def api(dashboard_server, admin_headers):
    def call(method: str, path: str, **kwargs) -> requests.Response:
        return requests.request(method, f"{dashboard_server.base_url}{path}", headers=admin_headers, timeout=10,
                                **kwargs)
    return call


def test_pending_approvals_are_counted_on_the_link_and_decided_on_the_workflows_page(logged_in_page, api, shot):
    page = logged_in_page
    workflow = api("POST", "/api/workflows", json={"name": "publish", **GATED}).json()
    runs = [api("POST", f"/api/workflows/{workflow['id']}/run", json={"input": text}).json()
            for text in ("the post", "the draft")]
    assert [run["status"] for run in runs] == ["waiting", "waiting"]
    page.problems.clear()
    page.goto("/#/workflows")
    link = page.get_by_role("navigation", name="Main").get_by_role("link", name="Workflows")
    expect(link.locator(".nav-count")).to_have_text("2")
    section = page.get_by_role("region", name="Waiting for your approval (2)")
    expect(section.get_by_text("Publish the post?")).to_be_visible()
    for size, label in ((PHONE, "375"), (DESKTOP, "1280")):
        page.set_viewport_size(size)
        expect(section.get_by_text("Publish the draft?")).to_be_visible()
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), label
        shot(page, f"workflows-approvals-{label}")

    post = page.locator(".wf-approval", has_text="Publish the post?")
    post.get_by_label("Comment (optional)").fill("looks good")
    post.get_by_role("button", name="Approve publish at ask").click()
    expect(link.locator(".nav-count")).to_have_text("1")
    expect(page.locator(".wf-approval", has_text="Publish the post?")).to_have_count(0)
    draft = page.locator(".wf-approval", has_text="Publish the draft?")
    draft.get_by_role("button", name="Reject publish at ask").click()
    expect(link.locator(".nav-count")).to_have_count(0)
    expect(page.get_by_role("region", name="Waiting for your approval (2)")).to_have_count(0)

    def finished(run_id: str):
        found = api("GET", f"/api/workflows/runs/{run_id}").json()
        return found["status"] == "success" and found

    approved, rejected = (poll(lambda r=run: finished(r["id"]), "the decided run resumed", timeout=30)
                          for run in runs)
    assert approved["output"] == {"decision": "approve", "comment": "looks good", "data": None, "by": "admin"}
    assert rejected["output"]["decision"] == "reject"
    assert page.problems == []


def test_a_streamed_run_in_the_editor_stops_waiting(logged_in_page, api):
    page = logged_in_page
    workflow = api("POST", "/api/workflows", json={"name": "publish-editor", **GATED}).json()
    page.goto(f"/#/workflows/{workflow['id']}")
    page.get_by_label("Run input").fill("news")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator(".wf-run-status")).to_contain_text("waiting for an approval")
    expect(page.locator('.wf-trace-item[data-node="ask"] .badge')).to_have_text("waiting")
    link = page.get_by_role("navigation", name="Main").get_by_role("link", name="Workflows")
    expect(link.locator(".nav-count")).to_have_text("1")

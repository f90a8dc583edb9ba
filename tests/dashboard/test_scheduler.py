"""The Scheduler page in a real browser: the cron field's live preview (and its error), creating a task,
enable/disable, run now with the run in the history (the real task cluster runs it), edit and delete."""

from __future__ import annotations

import subprocess
import sys

import pytest
import requests
from playwright.sync_api import expect

from tests.dashboard.conftest import DESKTOP, PHONE
from tests.server import ROOT

pytestmark = pytest.mark.e2e  # every test here starts a process

# `serve` starts the django-q2 cluster next to daphne: "Run now" queues a run that the cluster takes.
LIVE_SERVER_COMMAND = "serve"


@pytest.fixture
def api(dashboard_server, admin_headers):
    """A call to the server's API as the admin (the logged-in page's user)."""
    def call(method: str, path: str, **kwargs) -> requests.Response:
        return requests.request(method, f"{dashboard_server.base_url}{path}", headers=admin_headers, timeout=10,
                                **kwargs)
    return call


# The scheduler's own tick, in a process of its own on the server's database, after the task's next
# occurrence was moved three hours back: as if the scheduler had been down, so the task's `missed` policy
# applies (what the django-q2 schedule does every minute; a test cannot wait for it).
MISSED_TICK = """
import django
django.setup()
from datetime import timedelta
from django.utils import timezone
from scheduler.models import ScheduledTask
from scheduler.tasks import tick
ScheduledTask.objects.filter(pk={task_id!r}).update(next_run_at=timezone.now() - timedelta(hours=3))
tick()
"""


def task_item(page, name: str):
    return page.get_by_role("listitem", name=f"Task {name}")


def test_the_cron_field_previews_five_fire_times_as_you_type_and_creates_the_task(logged_in_page, api, shot):
    page = logged_in_page
    page.problems.clear()  # from here on, nothing may fail in the page but the refusals asked for below
    page.goto("/#/scheduler")
    form = page.get_by_role("form", name="New task")
    form.get_by_label("Name", exact=True).fill("morning-brief")
    form.get_by_label("Prompt").fill("Summarise the news.")
    form.get_by_label("Time zone").fill("Asia/Tokyo")
    cron = form.get_by_label("Cron")
    cron.fill("30 6 * * 1-5")
    # The times of what is typed now: the list is marked stale from a keystroke until its answer arrives.
    preview = form.locator(".sched-preview-times:not(.stale) time")
    expected = api("GET", "/api/scheduler/preview", params={"cron": "30 6 * * 1-5", "timezone": "Asia/Tokyo",
                                                             "count": 5}).json()["next"]
    expect(preview).to_have_count(5)
    expect(preview.first).to_have_attribute("datetime", expected[0])
    assert [preview.nth(index).get_attribute("datetime") for index in range(5)] == expected
    # Shown in the task's zone: 06:30 in Tokyo, whatever the browser's zone.
    expect(preview.first).to_contain_text("06:30")

    # Typing on: an expression that cannot fire shows the server's error at once, and no times.
    cron.press_sequentially(" *")
    expect(form.locator(".sched-preview-status [role=alert]")).to_be_visible()
    expect(preview).to_have_count(0)
    expect(cron).to_have_attribute("aria-invalid", "true")
    cron.fill("61 * * * *")
    expect(form.locator(".sched-preview-status [role=alert]")).to_contain_text("cron")
    form.get_by_role("button", name="Create task").click()
    expect(form.locator(".form-error")).to_contain_text("cron")
    assert api("GET", "/api/scheduler/tasks").json()["count"] == 0

    cron.fill("30 6 * * 1-5")
    expect(preview).to_have_count(5)
    expect(cron).not_to_have_attribute("aria-invalid", "true")
    form.get_by_role("button", name="Create task").click()
    item = task_item(page, "morning-brief")
    expect(item).to_be_visible()
    stored = api("GET", "/api/scheduler/tasks").json()["results"]
    assert [(task["name"], task["cron"], task["timezone"], task["missed"], task["enabled"]) for task in stored] == [
        ("morning-brief", "30 6 * * 1-5", "Asia/Tokyo", "run_once", True)]
    expect(item.locator(".next-run time")).to_have_attribute("datetime", stored[0]["next_run_at"])
    expect(item).to_contain_text("Asia/Tokyo")
    for size, label in ((PHONE, "375"), (DESKTOP, "1280")):
        page.set_viewport_size(size)
        expect(item).to_be_visible()
        shot(page, f"scheduler-{label}")
    assert [problem for problem in page.problems if "Failed to load resource" not in problem] == []


def test_disable_enable_run_now_and_the_history_with_a_skipped_run_and_its_reason(logged_in_page, api,
                                                                                 dashboard_server):
    # A schedule that fires only on 29 February, never while the test runs: an hourly one fired in the server when
    # the test crossed the hour (CI, 08:00), and that run held the occurrence the missed tick below records its
    # skip for (one run an occurrence), so no skip was recorded.
    task = api("POST", "/api/scheduler/tasks", json={"name": "leap-day-check", "cron": "0 12 29 2 *",
                                                     "prompt": "Say hello to the scheduler.", "missed": "skip"}).json()
    page = logged_in_page
    page.problems.clear()
    page.goto("/#/scheduler")
    item = task_item(page, "leap-day-check")
    expect(item.locator(".badge")).to_have_text("Enabled")

    item.get_by_role("button", name="Disable").click()
    expect(item.locator(".badge")).to_have_text("Disabled")
    expect(item.locator(".next-run")).to_have_text("Not scheduled (disabled)")
    assert api("GET", "/api/scheduler/tasks").json()["results"][0]["enabled"] is False
    item.get_by_role("button", name="Enable").click()
    expect(item.locator(".badge")).to_have_text("Enabled")
    stored = api("GET", "/api/scheduler/tasks").json()["results"][0]
    assert stored["enabled"] is True and stored["next_run_at"]
    expect(item.locator(".next-run time")).to_have_attribute("datetime", stored["next_run_at"])

    # Run now: the run is queued, the history opens and follows it until the cluster has run it.
    item.get_by_role("button", name="Run now").click()
    history = item.locator(".sched-runs")
    row = history.locator("tbody tr")
    expect(row).to_have_count(1)
    expect(row.first).to_contain_text("manual")
    expect(row.first.locator(".badge")).to_have_text("success", timeout=20_000)
    runs = api("GET", "/api/scheduler/history", params={"task": task["id"]}).json()["results"]
    assert [(run["trigger"], run["status"]) for run in runs] == [("manual", "success")]
    row.first.get_by_text("Output").click()
    expect(row.first.locator("pre")).to_have_text(runs[0]["output"])
    history_button = item.get_by_role("button", name="History")
    expect(history_button).to_have_attribute("aria-expanded", "true")

    # Missed occurrences of a `skip` task: one skipped run, its reason shown (a skip is not a failure).
    subprocess.run([sys.executable, "-c", MISSED_TICK.format(task_id=task["id"])], cwd=ROOT, check=True,
                   env=dashboard_server.env(), capture_output=True, timeout=60)
    runs = api("GET", "/api/scheduler/history", params={"task": task["id"]}).json()["results"]
    assert [run["status"] for run in runs] == ["skipped", "success"]
    history_button.click()
    expect(history_button).to_have_attribute("aria-expanded", "false")
    history_button.click()
    expect(row).to_have_count(2)
    skipped = history.locator("tr.status-skipped")
    expect(skipped.locator(".badge")).to_have_text("skipped")
    expect(skipped.locator(".reason")).to_have_text(runs[0]["error"])
    assert runs[0]["error"]

    # Edit through the form, then delete.
    item.get_by_role("button", name="Edit").click()
    form = page.get_by_role("form", name="Edit task leap-day-check")
    form.get_by_label("Cron").fill("15 */2 * * *")
    expect(form.locator(".sched-preview-times:not(.stale) time")).to_have_count(5)
    form.get_by_role("button", name="Save task").click()
    expect(item.locator(".sched-facts code")).to_have_text("15 */2 * * *")
    assert api("GET", "/api/scheduler/tasks").json()["results"][0]["cron"] == "15 */2 * * *"
    item.get_by_role("button", name="Delete").click()
    page.get_by_role("dialog").get_by_role("button", name="Delete").click()
    expect(item).to_have_count(0)
    assert task["id"] not in [each["id"] for each in api("GET", "/api/scheduler/tasks").json()["results"]]
    assert page.problems == []

"""The Activity page in a real browser (issue 28, item 5): an admin sees the audit log (a failed log-in and their
own log-in among its rows), narrows it with the filters, loads more than a page, and reads the health strip,
whose figures move with the requests and streamed model calls made meanwhile; while metrics are off the strip
says how to turn them on. A normal user has no link and no page. At 375 and 1280 px nothing overflows."""

from __future__ import annotations

import re
import secrets
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from playwright.sync_api import expect

from tests.dashboard.conftest import DESKTOP, PHONE, _missing, log_in
from tests.dashboard.test_layout import assert_fits
from tests.fakes.llm import Text
from tests.needs import unavailable
from tests.server import LiveServer

ACTIVITY_JS = (Path(__file__).resolve().parents[2] / "agentsite" / "dashboard" / "static" / "agentsite" / "dashboard"
               / "pages" / "activity.js")
# The strip asks every 5 s: a figure made from two answers is there within two polls.
POLLS_MS = 15000


@pytest.fixture(scope="module")
def dashboard_server():
    """This module's server counts metrics (the strip's figures); test_metrics_off starts one that does not."""
    reason = _missing()
    if reason:
        unavailable(reason)
    server = LiveServer(command="daphne", env={"AGENTSITE_LOGIN_RATE_LIMIT": "1000", "AGENTSITE_METRICS": "1"}).start()
    yield server
    server.stop()


def failed_login(base: str, username: str) -> None:
    answer = requests.post(f"{base}/api/auth/login", json={"username": username, "password": "not-the-password"},
                           timeout=10)
    assert answer.status_code == 401, answer.text


def figure(page, name: str):
    return page.locator(f"[data-figure='{name}'] .health-value")


@pytest.mark.e2e
def test_an_admin_reads_filters_and_pages_the_audit_log_and_the_health_strip(page, dashboard_server, chat_upstream,
                                                                              shot):
    base = dashboard_server.base_url
    flood = f"flood-{secrets.token_hex(3)}"
    # Side by side: each failed log-in hashes at the production count (~0.5 s of CPU), on a request thread of
    # its own, so the flood takes half the time on two cores.
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _: failed_login(base, flood), range(53)))
    intruder = f"intruder-{secrets.token_hex(3)}"
    failed_login(base, intruder)  # after the flood: on the first page, newest first
    log_in(page, dashboard_server, "admin", dashboard_server.admin_password)
    page.get_by_role("link", name="Activity").click()
    expect(page.get_by_role("heading", name="Activity", level=1)).to_be_visible()

    log = page.get_by_role("region", name="Audit log")
    failure = log.locator("tr[data-action='auth.login'][data-outcome='failure']").filter(has_text=intruder)
    expect(failure).to_have_count(1)
    expect(failure).to_contain_text("anonymous")
    success = log.locator("tr[data-action='auth.login'][data-outcome='success']").filter(has_text="admin")
    expect(success.first).to_be_visible()
    expect(log.locator("tr[data-event]")).to_have_count(50)  # the first page
    expect(log.locator(".activity-count")).to_contain_text("50 of ")

    # Filters: the outcome, then an actor, then an action family; an impossible one shows the empty state.
    filters = page.get_by_role("form", name="Filters")
    filters.get_by_label("Outcome").select_option("failure")
    filters.get_by_role("button", name="Filter").click()
    expect(log.locator("tr[data-outcome='success']")).to_have_count(0)
    expect(log.locator("tr[data-event]").first).to_have_attribute("data-outcome", "failure")
    filters.get_by_label("Actor").fill(flood)
    filters.get_by_role("button", name="Filter").click()
    expect(log.locator(".activity-count")).to_have_text("50 of 53 events, newest first.")
    expect(log.locator("tr[data-event]")).to_have_count(50)
    log.get_by_role("button", name="Load more").click()
    expect(log.locator("tr[data-event]")).to_have_count(53)
    expect(log.locator(".activity-count")).to_have_text("53 of 53 events, newest first.")
    expect(log.get_by_role("button", name="Load more")).to_have_count(0)
    filters.get_by_label("Actor").fill(intruder)
    filters.get_by_label("Action").fill("auth.")
    filters.get_by_role("button", name="Filter").click()
    expect(log.locator("tr[data-event]")).to_have_count(1)
    expect(log.locator("tr[data-event]")).to_contain_text(intruder)
    filters.get_by_label("Action").fill("key.")
    filters.get_by_role("button", name="Filter").click()
    expect(log.get_by_text("No event matches these filters.")).to_be_visible()
    filters.get_by_role("button", name="Clear").click()
    expect(log.locator("tr[data-outcome='success']").first).to_be_visible()
    expect(log.locator("tr[data-event]")).to_have_count(50)

    # The strip: the first answer gives the figures since the start, the second a rate.
    strip = page.get_by_role("region", name="Health")
    expect(figure(page, "streams")).to_have_text(re.compile(r"^\d+$"))
    expect(figure(page, "requests")).to_have_text(re.compile(r"^\d+\.\d\d$"), timeout=POLLS_MS)
    headers = {"Authorization": f"Bearer {dashboard_server.login()['token']}"}
    chat_upstream.script(*[Text("streamed", usage=(3, 2)) for _ in range(3)])
    for _ in range(3):
        answer = requests.post(f"{base}/v1/chat/completions", headers=headers, timeout=10, json={
            "model": "fake-model", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
        assert answer.status_code == 200 and "[DONE]" in answer.text, answer.text
    for _ in range(20):
        assert requests.get(f"{base}/api/health", timeout=10).status_code == 200
    # Requests made between two polls: a non-zero rate, and the streamed calls' median (a loopback fake: ms).
    expect(figure(page, "requests")).not_to_have_text("0.00", timeout=POLLS_MS)
    expect(figure(page, "latency")).to_have_text(re.compile(r"^\d+ ms$"), timeout=POLLS_MS)
    expect(strip.locator("[data-figure='latency']")).to_contain_text("streamed call")
    expect(figure(page, "errors")).to_have_text(re.compile(r"^(\d+(\.\d)? %|–)$"))
    for size, label in ((PHONE, "375"), (DESKTOP, "1280")):
        page.set_viewport_size(size)
        expect(log.locator("tr[data-event]").first).to_be_visible()
        assert_fits(page, f"#/activity at {label} px")
        shot(page, f"activity-{label}")

    # Leaving the page stops the polling.
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url) if "/api/metrics/summary" in request.url else None)
    page.get_by_role("link", name="Keys").click()
    expect(page.get_by_role("heading", name="API keys")).to_be_visible()
    page.wait_for_timeout(6000)
    assert asked == []
    assert not page.problems, page.problems


@pytest.mark.e2e
def test_a_user_has_no_activity_link_nor_page(user_page):
    page = user_page
    expect(page.get_by_role("link", name="Usage")).to_be_visible()
    expect(page.get_by_role("link", name="Activity")).to_have_count(0)
    page.goto("/#/activity")
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    for size in (PHONE, DESKTOP):
        page.set_viewport_size(size)
        assert_fits(page, f"#/activity for a user at {size['width']} px")
    assert not page.problems, page.problems


@pytest.mark.e2e
def test_with_metrics_off_the_strip_says_how_to_turn_them_on(browser, shot):
    server = LiveServer(command="daphne").start()
    try:
        context = browser.new_context(viewport=PHONE, base_url=server.base_url)
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda message: message.type == "error" and errors.append(message.text))
        log_in(page, server, "admin", server.admin_password)
        page.goto("/#/activity")
        note = page.get_by_role("region", name="Health").get_by_role("note")
        expect(note).to_contain_text("AGENTSITE_METRICS=1")
        expect(page.locator("[data-figure]")).to_have_count(0)
        log = page.get_by_role("region", name="Audit log")
        expect(log.locator("tr[data-action='auth.login']").first).to_be_visible()
        assert_fits(page, "#/activity with metrics off at 375 px")
        shot(page, "activity-metrics-off-375")
        assert errors == []
        context.close()
    finally:
        server.stop()


def test_the_action_suggestions_are_the_audit_logs_actions():
    from agentsite.core.audit import ACTIONS

    source = ACTIVITY_JS.read_text()
    listed = re.search(r"const ACTIONS = \[(.*?)\];", source, re.DOTALL)
    assert listed, "activity.js has no ACTIONS list"
    assert re.findall(r'"([a-z0-9_.]+)"', listed.group(1)) == list(ACTIONS)

"""The Usage page in a real browser (issue 27, item 5): a user sees their tokens per day stacked by model on the
chart and their calls by key and facet; an admin sets a user's daily budget in the per-user table, and the API
has it. At 375 and 1280 px nothing overflows."""

from __future__ import annotations

import pytest
import requests
from playwright.sync_api import expect

from tests.dashboard.conftest import DESKTOP, PHONE
from tests.dashboard.test_layout import assert_fits
from tests.e2e import poll
from tests.fakes.llm import Text

pytestmark = pytest.mark.e2e  # every test here starts a process


def test_a_user_sees_their_usage_and_an_admin_edits_a_budget(page, dashboard_server, normal_user, admin_headers,
                                                              chat_upstream, shot):
    from tests.dashboard.conftest import log_in

    base = dashboard_server.base_url
    user_headers = {"Authorization": f"Bearer {normal_user['token']}"}
    chat_upstream.script(Text("one", usage=(30, 12)), Text("two", usage=(20, 8)))
    for _ in range(2):
        answer = requests.post(f"{base}/v1/chat/completions", headers=user_headers, timeout=10,
                               json={"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]})
        assert answer.status_code == 200, answer.text
    poll(lambda: requests.get(f"{base}/api/usage", headers=user_headers, timeout=10).json()["totals"]["requests"] == 2,
         "the two calls flushed")

    log_in(page, dashboard_server, normal_user["username"], normal_user["password"])
    page.goto("/#/usage")
    chart = page.get_by_role("img", name="Tokens per day")
    expect(chart).to_be_visible()
    expect(chart.locator("rect[data-model='default/fake-model']")).to_have_count(1)
    expect(page.locator(".usage-totals")).to_contain_text("2 requests · 70 tokens (50 in, 20 out)")
    facets = page.get_by_role("region", name="By facet")
    expect(facets.get_by_role("row", name="v1")).to_contain_text("70")
    expect(page.get_by_role("region", name="By key")).to_contain_text("No key (dashboard)")
    expect(page.get_by_role("region", name="Users and budgets")).to_have_count(0)  # not an admin
    page.get_by_label("Show").select_option("cost")
    expect(page.get_by_role("img", name="Cost per day")).to_be_visible()
    for size, label in ((PHONE, "375"), (DESKTOP, "1280")):
        page.set_viewport_size(size)
        assert_fits(page, f"#/usage at {label} px")
        shot(page, f"usage-{label}")

    page.evaluate("sessionStorage.clear()")
    log_in(page, dashboard_server, "admin", dashboard_server.admin_password)
    page.goto("/#/usage")
    users = page.get_by_role("region", name="Users and budgets")
    expect(users).to_be_visible()
    name = normal_user["username"]
    row = users.get_by_role("row").filter(has_text=name)
    expect(row).to_contain_text("70 tokens")
    row.get_by_label(f"Tokens/day for {name}").fill("50000")
    row.get_by_role("button", name=f"Save the budget of {name}").click()
    expect(row.get_by_role("status")).to_have_text("Saved.")
    user_id = row.get_attribute("data-user")
    budget = requests.get(f"{base}/api/users/{user_id}/budget", headers=admin_headers, timeout=10).json()
    assert budget["tokens_per_day"] == 50000 and budget["cost_per_day"] is None
    for size, label in ((PHONE, "375"), (DESKTOP, "1280")):
        page.set_viewport_size(size)
        assert_fits(page, f"#/usage (admin) at {label} px")
        shot(page, f"usage-admin-{label}")
    assert not page.problems, page.problems

"""The Keys page in a real browser (issue 27): a user makes a key, sees its secret once and copies it with the
button, the copied secret works on /v1 and is never shown again, the list shows the key, revoking it asks
first and stops it at once; at 375 and 1280 px, nothing overflows. The Settings page warns while /v1 is
public."""

from __future__ import annotations

import pytest
import requests
from playwright.sync_api import expect

from tests.dashboard.conftest import DESKTOP, PHONE
from tests.dashboard.test_layout import assert_fits

pytestmark = pytest.mark.e2e  # every test here starts a process


def test_a_user_makes_a_key_copies_its_secret_once_and_revokes_it(user_page, dashboard_server, normal_user, shot):
    page = user_page
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.problems.clear()
    page.goto("/#/keys")
    expect(page.get_by_text("No key yet.")).to_be_visible()
    form = page.get_by_role("form", name="New key")
    expect(form.get_by_label("admin: admin operations too")).to_have_count(0)  # not an admin's page
    form.get_by_label("Name").fill("my laptop")
    form.get_by_label("mcp: the MCP server (/mcp)").check()
    form.get_by_role("button", name="Create key").click()

    created = page.get_by_role("region", name="Key “my laptop” created")
    expect(created).to_be_visible()
    secret = created.get_by_label("Secret of my laptop").input_value()
    assert secret.startswith("ask-") and len(secret) >= 44
    created.get_by_role("button", name="Copy").click()
    expect(created.get_by_role("status")).to_have_text("Copied.")
    assert page.evaluate("navigator.clipboard.readText()") == secret
    base = dashboard_server.base_url
    assert requests.get(f"{base}/v1/models", headers={"x-api-key": secret}, timeout=10).status_code == 200
    row = page.locator("tr[data-key]")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("my laptop")
    expect(row).to_contain_text(secret[:12])
    expect(row).to_contain_text("v1, mcp")
    expect(row.locator(".badge")).to_have_text("Active")
    for size, label in ((PHONE, "375"), (DESKTOP, "1280")):
        page.set_viewport_size(size)
        expect(created).to_be_visible()
        assert_fits(page, f"#/keys with a new secret at {label} px")
        shot(page, f"keys-new-secret-{label}")

    expect(form.get_by_label("v1: the OpenAI-compatible API (/v1)")).to_be_checked()  # the form is back to its defaults
    expect(form.get_by_label("mcp: the MCP server (/mcp)")).not_to_be_checked()
    created.get_by_role("button", name="Done").click()
    expect(created).to_have_count(0)
    page.reload()
    expect(page.locator("tr[data-key]")).to_have_count(1)
    assert secret not in page.content()  # shown once: never again

    page.get_by_role("button", name="Revoke my laptop").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("stop working at once")
    dialog.get_by_role("button", name="Revoke").click()
    expect(row.locator(".badge")).to_have_text("Revoked")
    expect(page.get_by_role("button", name="Revoke my laptop")).to_have_count(0)
    refused = requests.get(f"{base}/v1/models", headers={"x-api-key": secret}, timeout=10)
    assert refused.status_code == 401 and "revoked" in refused.json()["error"]["message"]
    for size, label in ((PHONE, "375"), (DESKTOP, "1280")):
        page.set_viewport_size(size)
        assert_fits(page, f"#/keys with a revoked key at {label} px")
        shot(page, f"keys-list-{label}")
    assert page.problems == []


def test_a_refused_key_names_the_field_and_an_admin_may_give_the_admin_scope(logged_in_page, shot):
    page = logged_in_page
    page.problems.clear()
    page.goto("/#/keys")
    form = page.get_by_role("form", name="New key")
    form.get_by_label("v1: the OpenAI-compatible API (/v1)").uncheck()
    form.get_by_label("Name").fill("nothing")
    form.get_by_role("button", name="Create key").click()
    expect(form.locator(".form-error")).to_contain_text("scope")
    form.get_by_label("admin: admin operations too").check()
    form.get_by_role("button", name="Create key").click()
    expect(page.get_by_role("region", name="Key “nothing” created")).to_be_visible()
    expect(page.locator("tr[data-key]").first).to_contain_text("admin")
    assert [problem for problem in page.problems if "Failed to load resource" not in problem] == []


def test_settings_warns_while_v1_is_public(logged_in_page, admin_headers, dashboard_server, shot):
    page = logged_in_page
    base = dashboard_server.base_url
    page.goto("/#/settings")
    config = page.get_by_role("form", name="Agent configuration")
    expect(config.get_by_label("/v1 API access")).to_have_value("local")
    expect(page.locator(".settings-public-warning")).to_have_count(0)
    config.get_by_label("/v1 API access").select_option("public")
    config.get_by_role("button", name="Save configuration").click()
    warning = page.locator(".settings-public-warning")
    expect(warning).to_contain_text("anyone who can reach this server")
    for size, label in ((PHONE, "375"), (DESKTOP, "1280")):
        page.set_viewport_size(size)
        assert_fits(page, f"#/settings while public at {label} px")
        shot(page, f"settings-public-{label}")
    config = page.get_by_role("form", name="Agent configuration")
    config.get_by_label("/v1 API access").select_option("key")
    config.get_by_role("button", name="Save configuration").click()
    expect(warning).to_have_count(0)
    assert requests.get(f"{base}/api/config", headers=admin_headers, timeout=10).json()["compat_auth"] == "key"
    requests.patch(f"{base}/api/config", headers=admin_headers, timeout=10,
                   json={"compat_auth": "local"}).raise_for_status()

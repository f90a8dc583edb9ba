"""The API docs page (/api/docs, Swagger UI from drf-spectacular's sidecar) in a real browser: it sends a
Content-Security-Policy that allows only its own files, and it renders under that policy with no refusal."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.server import LiveServer

pytestmark = pytest.mark.e2e  # every test here starts a process


def _directives(policy: str) -> dict[str, str]:
    return {part.strip().split(" ", 1)[0]: part.strip().partition(" ")[2] for part in policy.split(";") if part.strip()}


def test_the_api_docs_page_sends_a_policy_of_its_own_files_only(dashboard_server: LiveServer):
    import requests

    answer = requests.get(f"{dashboard_server.base_url}/api/docs", timeout=10)
    assert answer.status_code == 200, answer.text[:300]
    policy = answer.headers.get("Content-Security-Policy")
    assert policy, "/api/docs sent no Content-Security-Policy"
    directives = _directives(policy)
    assert directives["default-src"] == "'self'"
    assert directives["script-src"] == "'self'"  # no inline script, no eval, no other origin
    assert directives["style-src"] == "'self'"
    assert directives["object-src"] == "'none'" and directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in policy
    assert "<script>" not in answer.text and "<style>" not in answer.text


def test_the_api_docs_page_renders_under_its_policy_with_no_refusal(page, dashboard_server: LiveServer):
    refusals: list[str] = []
    # Every refusal, whatever the console says about it (a blocked style or font is not always an error line).
    page.on("console", lambda message: "Content Security Policy" in message.text and refusals.append(message.text))
    answer = page.goto("/api/docs")
    assert answer is not None and answer.status == 200
    assert answer.header_value("content-security-policy"), "/api/docs sent no Content-Security-Policy"
    # Rendered from the schema: the title, an operation, and Swagger UI's own stylesheet applied.
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("agentsite API")
    # The schema's first operation, whichever it is: Swagger UI draws the list as it is scrolled, so a later one
    # may not exist yet.
    first = page.locator(".opblock-summary-path").first
    expect(first).to_be_visible()
    first.click()
    expect(page.get_by_role("button", name="Try it out").first).to_be_visible()
    assert refusals == []
    assert page.problems == []
    assert page.evaluate("getComputedStyle(document.body).marginTop") == "0px"  # the page style, from a file

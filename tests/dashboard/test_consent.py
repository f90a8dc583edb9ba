"""The consent page in a real browser (issue 48): an app's authorization request (GET /oauth/authorize) lands on
#/consent/<id>, which shows the app's name, the host it sends the browser back to, the scope and who is signed
in; Allow sends the browser to the app with a code, Deny with error=access_denied. A visitor who is not signed in
signs in first (the password form here; single sign-on in test_consent_sso.py) and comes back to the consent;
"Not you?" signs out and back in as someone else; an unknown or decided request says so. At 375 px nothing
overflows."""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import requests
from playwright.sync_api import expect

from tests.dashboard.conftest import PHONE
from tests.dashboard.test_layout import assert_fits
from tests.server import LiveServer, refusing_port

pytestmark = pytest.mark.e2e  # every test here starts a process


@dataclass
class Authorization:
    """An app registered on the server and its authorization request, ready to be opened in the browser."""

    client_id: str
    redirect_uri: str
    state: str
    verifier: str
    url: str


def authorization(server: LiveServer, name: str = "Consent test app", resource: str = "mcp") -> Authorization:
    """Register a public client (its redirect URI on a loopback port where nothing listens) and build its
    authorization URL with PKCE, for the resource <origin>/<resource> (mcp or a2a) and its scope."""
    redirect_uri = f"http://127.0.0.1:{refusing_port()}/callback"
    answer = requests.post(f"{server.base_url}/oauth/register", timeout=10, json={
        "client_name": name, "redirect_uris": [redirect_uri], "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"]})
    assert answer.status_code == 201, answer.text
    client_id = answer.json()["client_id"]
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    state = secrets.token_urlsafe(12)
    query = urlencode({"response_type": "code", "client_id": client_id, "redirect_uri": redirect_uri,
                       "code_challenge": challenge, "code_challenge_method": "S256", "state": state,
                       "resource": f"{server.base_url}/{resource}", "scope": resource})
    return Authorization(client_id, redirect_uri, state, verifier, f"{server.base_url}/oauth/authorize?{query}")


def decide(page, auth: Authorization, button: str) -> dict[str, list[str]]:
    """Press Allow or Deny; the browser leaves for the app's redirect URI (which the test answers in the app's
    stead): its query."""
    page.route(f"{auth.redirect_uri}**", lambda route: route.fulfill(
        status=200, content_type="text/html", body="<title>The app</title><p>Back in the app.</p>"))
    page.get_by_role("button", name=button, exact=True).click()
    page.wait_for_url(f"{auth.redirect_uri}?**")
    return parse_qs(urlsplit(page.url).query)


def exchange(server: LiveServer, auth: Authorization, code: str) -> requests.Response:
    return requests.post(f"{server.base_url}/oauth/token", timeout=10, data={
        "grant_type": "authorization_code", "code": code, "redirect_uri": auth.redirect_uri,
        "code_verifier": auth.verifier, "client_id": auth.client_id})


def test_a_signed_in_user_sees_the_app_and_allows_it(logged_in_page, dashboard_server, shot):
    page = logged_in_page
    page.problems.clear()
    auth = authorization(dashboard_server, "Claude test connector")
    page.goto(auth.url)
    assert urlsplit(page.url).fragment.startswith("/consent/")
    card = page.get_by_role("region", name="Claude test connector wants to use your agentsite account")
    expect(card).to_be_visible()
    expect(card.locator(".consent-host")).to_have_text(urlsplit(auth.redirect_uri).netloc)
    expect(card.locator("li[data-scope=mcp]")).to_contain_text("MCP server")
    expect(card.locator(".consent-user")).to_have_text("admin")
    title = page.get_by_role("heading", name="Claude test connector wants to use your agentsite account")
    expect(title).to_be_focused()
    page.keyboard.press("Tab")  # then, by keyboard: the sign-out link, Deny, Allow
    expect(page.get_by_role("button", name="Sign out")).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Deny", exact=True)).to_be_focused()
    expect(page.get_by_role("link", name="Authorize an app")).to_have_count(0)  # not in the navigation
    assert page.title().startswith("Authorize an app")
    page.set_viewport_size(PHONE)
    assert_fits(page, "#/consent at 375 px")
    shot(page, "consent-375")

    query = decide(page, auth, "Allow")
    assert query["state"] == [auth.state] and "error" not in query
    token = exchange(dashboard_server, auth, query["code"][0])
    assert token.status_code == 200, token.text
    assert token.json()["scope"] == "mcp"
    assert page.problems == []


def test_deny_sends_the_app_access_denied_and_the_request_is_then_gone(logged_in_page, dashboard_server):
    page = logged_in_page
    auth = authorization(dashboard_server)
    page.goto(auth.url)
    consent = urlsplit(page.url).fragment
    expect(page.get_by_role("button", name="Deny", exact=True)).to_be_visible()
    query = decide(page, auth, "Deny")
    assert query["error"] == ["access_denied"] and query["state"] == [auth.state] and "code" not in query
    # Decided once: the same page again says the request is gone, and offers no button.
    page.goto(f"/#{consent}")
    expect(page.get_by_role("heading", name="This request has expired")).to_be_focused()
    expect(page.get_by_role("alert").filter(has_text="connect again")).to_be_visible()
    expect(page.get_by_role("button", name="Allow", exact=True)).to_have_count(0)


def test_an_unknown_request_says_so(logged_in_page):
    page = logged_in_page
    page.problems.clear()
    page.goto("/#/consent/no-such-request")
    expect(page.get_by_role("heading", name="This request has expired")).to_be_visible()
    expect(page.get_by_role("button", name="Allow", exact=True)).to_have_count(0)


def test_a_signed_out_visitor_signs_in_with_a_password_and_comes_back_to_the_consent(
        page, dashboard_server, normal_user, shot):
    auth = authorization(dashboard_server)
    page.goto(auth.url)
    expect(page.get_by_role("status").filter(has_text="An app asks to use your account")).to_be_visible()
    expect(page.get_by_label("Username")).to_be_focused()
    page.set_viewport_size(PHONE)
    assert_fits(page, "the consent's sign-in at 375 px")
    shot(page, "consent-sign-in-375")
    page.get_by_label("Username").fill(normal_user["username"])
    page.get_by_label("Password").fill(normal_user["password"])
    page.get_by_role("button", name="Log in").click()
    expect(page.locator(".consent-user")).to_have_text(normal_user["username"])
    assert page.evaluate("() => sessionStorage.getItem('agentsite.consent')") is None  # taken: forgotten

    # Not you? Sign out, and sign in as someone else: the same request is back, for that user.
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("status").filter(has_text="An app asks to use your account")).to_be_visible()
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill(dashboard_server.admin_password)
    page.get_by_role("button", name="Log in").click()
    expect(page.locator(".consent-user")).to_have_text("admin")
    query = decide(page, auth, "Allow")
    token = exchange(dashboard_server, auth, query["code"][0])
    assert token.status_code == 200, token.text
    # The code was given to the one who allowed it: the admin.
    apps = requests.get(f"{dashboard_server.base_url}/api/oauth/apps", timeout=10,
                        headers={"Authorization": f"Bearer {dashboard_server.login()['token']}"}).json()["results"]
    assert [app["user"]["username"] for app in apps if app["client_id"] == auth.client_id] == ["admin"]
    assert page.problems == []

"""Single sign-on in the dashboard, in Chromium, against the real test provider (tests/oidc: npm's oidc-provider).

One provider for the module, and two `serve` servers signing in through it: `sso_server` (password sign-in on;
groups made from the claim, `agentsite-admins` makes admins, only `staff` and `agentsite-admins` may sign in)
and `closed_server` (the same with AGENTSITE_PASSWORD_LOGIN=0). Each test signs in with a login name of its own
in a fresh browser context: a context is a browser with no session at the provider, so the provider asks for
the log-in each time.

The provider's failures are observed, not intercepted (Playwright cannot intercept a request reached through a
redirect chain): a test reads the callback URL from the page's requests and replays it with page.goto.
"""

from __future__ import annotations

import re
import secrets
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from playwright.sync_api import expect

from tests.dashboard.conftest import DESKTOP, PHONE, TIMEOUT_MS, _missing
from tests.needs import unavailable
from tests.oidc.harness import OidcProvider, oidc_env
from tests.server import ROOT, LiveServer

pytestmark = pytest.mark.e2e

IDP = "Test IdP"  # AGENTSITE_OIDC_NAME in oidc_env: the button's label
ADMINS = "agentsite-admins"
PASSWORD = "sso-dashboard-pass-42"
CALLBACK = "/api/auth/oidc/callback"


def sso_env(provider: OidcProvider, **overrides: str) -> dict[str, str]:
    return oidc_env(provider, AGENTSITE_OIDC_CREATE_GROUPS="1", AGENTSITE_OIDC_ADMIN_GROUPS=ADMINS,
                    AGENTSITE_OIDC_ALLOWED_GROUPS=f"staff,{ADMINS}", AGENTSITE_LOGIN_RATE_LIMIT="1000", **overrides)


@pytest.fixture(scope="module")
def idp() -> Iterator[OidcProvider]:
    reason = _missing()
    if reason:
        unavailable(reason)
    provider = OidcProvider().start()
    yield provider
    provider.stop()


@pytest.fixture(scope="module")
def servers(idp: OidcProvider) -> Iterator[tuple[LiveServer, LiveServer]]:
    """Both servers, started side by side and stopped side by side (each start and stop of `serve` is seconds of
    waiting)."""
    both = (LiveServer(command="serve", env=sso_env(idp)),
            LiveServer(command="serve", env=sso_env(idp, AGENTSITE_PASSWORD_LOGIN="0")))
    try:
        for server in both:
            server.launch()
        for server in both:
            server.wait_healthy(60)
        yield both
    finally:
        stoppers = [threading.Thread(target=server.stop) for server in both]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join()


@pytest.fixture(scope="module")
def sso_server(servers: tuple[LiveServer, LiveServer]) -> LiveServer:
    return servers[0]


@pytest.fixture(scope="module")
def closed_server(servers: tuple[LiveServer, LiveServer]) -> LiveServer:
    """Password sign-in off. The initial admin is made break-glass with `manage.py breakglass admin` (whether or
    not something made it so already), and a normal user with a password exists: `closed_server.user`."""
    server = servers[1]
    username = f"pw-{secrets.token_hex(3)}"
    script = ("import django; django.setup(); from django.core.management import call_command; "
              "from accounts.services import user_register; "
              f"user_register(username={username!r}, password={PASSWORD!r}); call_command('breakglass', 'admin')")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=server.env(), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    # The initial admin is break-glass from the first start; the command says so either way.
    assert re.search(r"admin (may|was already allowed to) sign in with a password", done.stdout), done.stdout
    server.user = username  # type: ignore[attr-defined]
    return server


@pytest.fixture
def open_page(browser) -> Iterator[Callable]:
    """open_page(server, viewport=DESKTOP): a page in a fresh browser context on that server, with
    `page.problems` (page errors and the console errors of the dashboard's own origin) and `page.callbacks`
    (every callback URL the provider sent this page to)."""
    contexts = []

    def open_(server: LiveServer, viewport: dict[str, int] = DESKTOP):
        context = browser.new_context(viewport=viewport, base_url=server.base_url)
        context.set_default_timeout(TIMEOUT_MS)
        contexts.append(context)
        page = context.new_page()
        page.problems = []
        page.callbacks = []
        page.on("pageerror", lambda error: page.problems.append(f"page error: {error}"))
        page.on("console", lambda message: message.type == "error"
                and (message.location.get("url") or "").startswith(server.base_url)
                and page.problems.append(f"console: {message.text}"))
        page.on("request", lambda request: CALLBACK in request.url and page.callbacks.append(request.url))
        return page

    yield open_
    for context in contexts:
        context.close()


def provider_log_in(page, login: str) -> None:
    """At the provider's log-in form (any password is right there)."""
    page.locator("input[name=login]").fill(login)
    page.locator("input[name=password]").fill("any password")
    page.get_by_role("button", name="Sign-in").click()


def sso_sign_in(page, login: str) -> None:
    """From the dashboard's log-in form through the provider and back; the dashboard shows the user signed in."""
    page.goto("/")
    page.get_by_role("link", name=IDP).click()
    provider_log_in(page, login)
    expect(page.get_by_role("button", name="Log out")).to_be_visible()


def stored(page) -> dict:
    return page.evaluate("() => JSON.parse(sessionStorage.getItem('agentsite.auth'))")


def me(server: LiveServer, page) -> dict:
    """GET /api/auth/me with the page's own token."""
    answer = requests.get(f"{server.base_url}/api/auth/me", timeout=10,
                          headers={"Authorization": f"Bearer {stored(page)['token']}"})
    answer.raise_for_status()
    return answer.json()


def group_names(user: dict) -> set[str]:
    return {group["name"] for group in user["groups"]}


def failure_reason(page) -> str:
    expect(page.get_by_role("heading", name=f"Sign-in with {IDP} failed")).to_be_visible()
    return page.locator("#reason").inner_text()


def login_name(what: str) -> str:
    return f"{what}-{secrets.token_hex(3)}"


# --- the log-in form ---


def test_the_form_offers_the_provider_beside_the_password_form(sso_server, open_page, shot):
    page = open_page(sso_server)
    page.goto("/")
    button = page.get_by_role("link", name=IDP)
    expect(button).to_be_visible()
    expect(button).to_have_attribute("href", "/api/auth/oidc/login")
    expect(page.get_by_label("Username")).to_be_visible()
    expect(page.get_by_role("button", name="Create an account")).to_be_visible()
    shot(page, "login-sso")
    # Keyboard: the provider's button is the stop before the username field (which has the focus), and Enter
    # on it leaves for the provider.
    expect(page.get_by_label("Username")).to_be_focused()
    page.keyboard.press("Shift+Tab")
    expect(button).to_be_focused()
    page.set_viewport_size(PHONE)
    box = button.bounding_box()
    assert box and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
    assert page.problems == []
    page.keyboard.press("Enter")
    expect(page.locator("input[name=login]")).to_be_visible()


def test_a_first_sign_in_creates_the_user_with_the_providers_groups(idp, sso_server, open_page):
    login = login_name("first")
    idp.account(login, groups=["staff", "sales"], email=f"{login}@example.com", email_verified=True,
                given_name="First", family_name="Person")
    page = open_page(sso_server)
    sso_sign_in(page, login)
    expect(page.locator(".who")).to_have_text(login)
    assert page.url.endswith("#/chat")
    expect(page.get_by_role("link", name="Activity")).to_have_count(0)  # not an admin
    auth = stored(page)
    assert auth["sso"] is True and auth["refresh"]
    user = me(sso_server, page)
    assert user["username"] == login and user["is_admin"] is False
    assert group_names(user) == {"staff", "sales"}
    assert page.problems == []
    # The ticket was single use: the cookie is gone, and a second collection is refused.
    assert "agentsite_sso_ticket" not in {cookie["name"] for cookie in page.context.cookies()}
    assert page.evaluate("() => fetch('/api/auth/oidc/session', {method: 'POST'}).then((r) => r.status)") == 401


def test_a_link_to_the_landing_leaves_a_signed_in_user_signed_in(idp, sso_server, open_page):
    # #/sso with no ticket to collect (a link from anywhere) must not sign the tab out (a log-out by link).
    login = login_name("stays")
    idp.account(login, groups=["staff"])
    page = open_page(sso_server)
    sso_sign_in(page, login)
    token = stored(page)["token"]
    page.goto("about:blank")  # a page load at #/sso (a link followed), not a change of the address's fragment
    page.goto("/#/sso")
    expect(page.get_by_role("button", name="Log out")).to_be_visible()
    assert stored(page)["token"] == token and me(sso_server, page)["username"] == login
    # The browser reports the collection's 401 (nothing to collect) as a failed load; nothing else went wrong.
    assert [problem for problem in page.problems if "status of 401" not in problem] == []


def test_a_second_sign_in_replaces_the_groups(idp, sso_server, open_page):
    login = login_name("mover")
    idp.account(login, groups=["staff", "sales"])
    first = open_page(sso_server)
    sso_sign_in(first, login)
    assert group_names(me(sso_server, first)) == {"staff", "sales"}

    idp.account(login, groups=["staff", "support"])
    second = open_page(sso_server)
    sso_sign_in(second, login)
    user = me(sso_server, second)
    assert user["username"] == login  # the same account, not a new one
    assert group_names(user) == {"staff", "support"}


def test_the_admin_group_grants_admin_and_leaving_it_takes_it_away(idp, sso_server, open_page):
    login = login_name("boss")
    idp.account(login, groups=["staff", ADMINS])
    page = open_page(sso_server)
    sso_sign_in(page, login)
    expect(page.get_by_role("link", name="Activity")).to_be_visible()
    expect(page.locator(".account .badge")).to_have_text("admin")
    assert me(sso_server, page)["is_admin"] is True

    idp.account(login, groups=["staff"])
    page = open_page(sso_server)
    sso_sign_in(page, login)
    expect(page.get_by_role("link", name="Chat", exact=True)).to_be_visible()
    expect(page.get_by_role("link", name="Activity")).to_have_count(0)
    expect(page.locator(".account .badge")).to_have_count(0)
    user = me(sso_server, page)
    assert user["is_admin"] is False and group_names(user) == {"staff"}


def test_a_user_outside_the_allowed_groups_is_refused_with_the_reason(idp, sso_server, open_page):
    login = login_name("outsider")
    idp.account(login, groups=["contractors"])
    page = open_page(sso_server)
    page.goto("/")
    page.get_by_role("link", name=IDP).click()
    provider_log_in(page, login)
    assert failure_reason(page) == "not_allowed"
    expect(page.locator("#detail")).to_contain_text("Only members of staff")
    expect(page.locator("#retry")).to_have_count(0)  # trying again cannot help
    assert not [cookie for cookie in page.context.cookies() if cookie["name"] == "agentsite_sso_ticket"]
    # Refused before anything changed: no account was made.
    admin = {"Authorization": f"Bearer {sso_server.login()['token']}"}
    users = requests.get(f"{sso_server.base_url}/api/users", params={"search": login}, headers=admin, timeout=10)
    users.raise_for_status()
    assert users.json()["count"] == 0
    # Back to agentsite: the log-in form, nobody signed in.
    page.locator("#home").click()
    expect(page.get_by_role("link", name=IDP)).to_be_visible()


def test_a_replayed_callback_is_refused(idp, sso_server, open_page):
    login = login_name("replay")
    idp.account(login, groups=["staff"])
    page = open_page(sso_server)
    sso_sign_in(page, login)
    assert len(page.callbacks) == 1, page.callbacks
    assert set(parse_qs(urlsplit(page.callbacks[0]).query)) >= {"code", "state"}
    page.goto(page.callbacks[0])
    assert failure_reason(page) == "state_invalid"
    body = page.content()
    assert parse_qs(urlsplit(page.callbacks[0]).query)["code"][0] not in body  # the page leaks nothing


@pytest.mark.parametrize(("mode", "reason"), [("tamper", "bad_signature"), ("wrong_aud", "wrong_audience"),
                                              ("expired", "expired")])
def test_a_bad_id_token_is_refused_with_the_reason(idp, sso_server, open_page, mode, reason):
    login = login_name(mode.replace("_", "-"))
    idp.account(login, groups=["staff"])
    page = open_page(sso_server)
    page.goto("/")
    page.get_by_role("link", name=IDP).click()
    idp.mode(mode)
    try:
        provider_log_in(page, login)
        assert failure_reason(page) == reason
    finally:
        idp.mode(None)
    expect(page.locator("#retry")).to_have_attribute("href", "/api/auth/oidc/login")
    # Nothing to collect: the dashboard at #/sso says the sign-in is gone, and shows the form again.
    page.goto("/#/sso")
    expect(page.get_by_role("alert").filter(
        has_text="The sign-in expired or was already used; sign in again.")).to_be_visible()
    expect(page.get_by_role("link", name=IDP)).to_be_visible()
    assert page.evaluate("() => sessionStorage.getItem('agentsite.auth')") is None
    assert not page.url.endswith("#/sso")  # a reload does not try again


def test_sign_out_ends_the_providers_session_too(idp, sso_server, open_page):
    login = login_name("leaver")
    idp.account(login, groups=["staff"])
    page = open_page(sso_server)
    sso_sign_in(page, login)
    refresh = stored(page)["refresh"]
    before = len(idp.log())
    ended = []
    page.on("request", lambda request: urlsplit(request.url).path == "/session/end" and ended.append(request.url))

    page.get_by_role("button", name="Log out").click()
    page.get_by_role("button", name="Yes, sign me out").click()  # the provider's own confirmation
    page.wait_for_url(f"{sso_server.base_url}/**")
    expect(page.get_by_role("link", name=IDP)).to_be_visible()
    assert page.evaluate("() => sessionStorage.getItem('agentsite.auth')") is None

    assert ended and ended[0].startswith(idp.issuer), ended
    query = parse_qs(urlsplit(ended[0]).query)
    assert query["id_token_hint"][0].count(".") == 2
    assert query["post_logout_redirect_uri"] == [f"{sso_server.base_url}/"]
    seen = [entry for entry in idp.log()[before:] if entry["path"] == "/session/end"]
    assert seen and seen[0]["query"]["id_token_hint"] == query["id_token_hint"][0], seen
    # agentsite's session is over too (the refresh token was revoked), and so is the provider's: the next
    # sign-in asks for the log-in again.
    assert requests.post(f"{sso_server.base_url}/api/auth/refresh", json={"refresh": refresh},
                         timeout=10).status_code == 401
    page.get_by_role("link", name=IDP).click()
    expect(page.locator("input[name=login]")).to_be_visible()


def test_sign_out_with_an_expired_access_token_still_reaches_the_provider(idp, sso_server, open_page):
    """The log-out call refreshes the expired token on the way, which rotates the refresh token its body named:
    the dashboard asks again with the new one, and the provider's sign-out still follows."""
    login = login_name("stale")
    idp.account(login, groups=["staff"])
    page = open_page(sso_server)
    sso_sign_in(page, login)
    # The dashboard's own api.js module (the one app.js imported): its in-memory access token made invalid, once
    # the chat page has asked all it asks (a call of its own would refresh the token before the log-out does).
    page.wait_for_load_state("networkidle")
    page.evaluate("""async () => {
        const client = await import(new URL('api.js', document.querySelector('script[type=module]').src).href);
        const auth = client.session();
        client.setTokens({ token: 'expired.' + auth.token.split('.')[1] + '.x' });
    }""")
    assert stored(page)["sso"] is True
    ended = []
    page.on("request", lambda request: urlsplit(request.url).path == "/session/end" and ended.append(request.url))
    page.get_by_role("button", name="Log out").click()
    expect(page.get_by_role("button", name="Yes, sign me out")).to_be_visible()
    assert ended and "id_token_hint=" in ended[0], ended


# --- password sign-in off ---


def test_with_password_sign_in_off_the_form_is_the_providers_button_alone(closed_server, open_page, shot):
    page = open_page(closed_server)
    page.goto("/")
    expect(page.get_by_role("link", name=IDP)).to_be_visible()
    page.wait_for_load_state("networkidle")
    expect(page.get_by_label("Username")).to_have_count(0)
    expect(page.get_by_label("Password")).to_have_count(0)
    expect(page.get_by_role("button", name="Log in")).to_have_count(0)
    expect(page.get_by_role("button", name="Create an account")).to_have_count(0)
    expect(page.get_by_role("link", name=IDP)).to_be_focused()
    shot(page, "login-sso-only")
    assert page.problems == []


def test_with_password_sign_in_off_only_the_break_glass_admin_gets_in(closed_server, open_page):
    page = open_page(closed_server)
    page.goto("/")
    expect(page.get_by_role("link", name=IDP)).to_be_visible()
    page.goto("/#/login/password")  # the same document: the address alone switches the form
    hint = page.get_by_text("only its break-glass administrators")
    expect(hint).to_be_visible()
    page.get_by_role("link", name="Sign in with single sign-on instead").click()
    expect(page.get_by_role("link", name=IDP)).to_be_visible()
    expect(page.get_by_label("Username")).to_have_count(0)
    page.go_back()
    expect(hint).to_be_visible()
    page.get_by_label("Username").fill(closed_server.user)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("alert").filter(has_text="Password sign-in is turned off")).to_be_visible()
    assert page.evaluate("() => sessionStorage.getItem('agentsite.auth')") is None

    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill(closed_server.admin_password)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("link", name="Activity")).to_be_visible()
    expect(page.locator(".who")).to_have_text("admin")
    assert page.url.endswith("#/chat")
    assert stored(page)["sso"] is False
    # The refused log-in's 403 is the one failed request.
    assert [problem for problem in page.problems if "403 (Forbidden)" not in problem] == []

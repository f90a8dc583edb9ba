"""The consent page reached by a visitor who signs in with single sign-on (issue 48): the sign-in leaves the
dashboard for the test OpenID provider (tests/oidc) and comes back at #/sso, and the dashboard resumes the app's
authorization request it was opened for, for the user the provider signed in."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import expect

from tests.dashboard.conftest import _missing
from tests.dashboard.test_consent import authorization, exchange
from tests.dashboard.test_sso import IDP, login_name, provider_log_in, sso_env
from tests.needs import unavailable
from tests.oidc.harness import OidcProvider
from tests.server import LiveServer

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def idp() -> Iterator[OidcProvider]:
    reason = _missing()
    if reason:
        unavailable(reason)
    provider = OidcProvider().start()
    yield provider
    provider.stop()


@pytest.fixture(scope="module")
def sso_server(idp: OidcProvider) -> Iterator[LiveServer]:
    server = LiveServer(command="serve", env=sso_env(idp)).start()
    yield server
    server.stop()


def test_a_visitor_signs_in_with_single_sign_on_and_comes_back_to_the_consent(browser, idp, sso_server):
    login = login_name("consent")
    idp.account(login, groups=["staff"], email=f"{login}@example.com", email_verified=True)
    auth = authorization(sso_server, "SSO consent app")
    context = browser.new_context(base_url=sso_server.base_url)
    try:
        page = context.new_page()
        problems: list[str] = []
        page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
        page.goto(auth.url)
        expect(page.get_by_role("status").filter(has_text="An app asks to use your account")).to_be_visible()
        page.get_by_role("link", name=IDP).click()
        provider_log_in(page, login)
        card = page.get_by_role("region", name="SSO consent app wants to use your agentsite account")
        expect(card).to_be_visible()
        expect(card.locator(".consent-user")).to_have_text(login)
        assert page.evaluate("() => sessionStorage.getItem('agentsite.consent')") is None
        page.route(f"{auth.redirect_uri}**", lambda route: route.fulfill(status=200, content_type="text/html",
                                                                          body="<p>Back in the app.</p>"))
        page.get_by_role("button", name="Allow", exact=True).click()
        page.wait_for_url(f"{auth.redirect_uri}?**")
        query = parse_qs(urlsplit(page.url).query)
        assert query["state"] == [auth.state]
        token = exchange(sso_server, auth, query["code"][0])
        assert token.status_code == 200, token.text
        assert problems == []
    finally:
        context.close()

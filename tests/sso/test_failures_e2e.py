"""Every way a sign-in fails at the callback, driven through the test provider (tests/oidc) against a real server:
each answers the page (its status and `reason`, no token, code or state in it, never cached) and the audit event
`auth.sso_failed` with that reason; and GET /api/auth/oidc/login's limit per client address."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import requests

from tests.oidc.harness import OidcProvider, sign_in
from tests.server import LiveServer
from tests.sso.conftest import JWT_PREFIX, SsoServer, browser, sso_env

pytestmark = pytest.mark.e2e

CALLBACK = "/api/auth/oidc/callback"


def query_of(url: str) -> dict[str, str]:
    return {name: values[0] for name, values in parse_qs(urlsplit(url).query).items()}


def assert_failure(server: SsoServer, response: requests.Response | None, *, status: int, reason: str,
                   ip: str, secrets: tuple[str, ...] = ()) -> dict:
    """The failure page and its audit event; returns the event."""
    assert response is not None
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["Content-Type"].startswith("text/html")
    assert response.headers["Cache-Control"] == "no-store"
    assert f'<code id="reason">{reason}</code>' in response.text, response.text
    assert JWT_PREFIX not in response.text
    for secret in secrets:
        assert secret not in response.text, f"the page shows {secret!r}"
    events = server.audit_from("auth.sso_failed", ip)
    assert [event["details"]["reason"] for event in events] == [reason], events
    return events[0]


def test_a_replayed_callback_is_refused_as_an_unknown_state(sso_server: SsoServer):
    http = browser()
    done = sign_in(sso_server.base_url, "fail-replay", http=http)
    assert done.tokens is not None
    again = http.get(done.callback_url, allow_redirects=False, timeout=10)
    query = query_of(done.callback_url)
    assert_failure(sso_server, again, status=400, reason="state_invalid", ip=http.ip,  # type: ignore[attr-defined]
                   secrets=(query["code"], query["state"]))


@pytest.mark.parametrize("other", ["no_cookie", "another_cookie"])
def test_a_callback_opened_in_another_browser_is_refused_and_uses_the_sign_in_up(sso_server: SsoServer, other):
    base = sso_server.base_url
    started = sign_in(base, f"fail-browser-{other}", http=browser(), follow=False)
    thief = browser()
    if other == "another_cookie":  # the other browser started a sign-in of its own: it has a binding cookie
        assert thief.get(f"{base}/api/auth/oidc/login", allow_redirects=False, timeout=10).status_code == 302
        assert thief.cookies.get("agentsite_oidc")
    answer = thief.get(started.callback_url, allow_redirects=False, timeout=10)
    query = query_of(started.callback_url)
    assert_failure(sso_server, answer, status=400, reason="browser_mismatch", ip=thief.ip,  # type: ignore[attr-defined]
                   secrets=(query["code"], query["state"]))
    # The state is spent: the browser that started it cannot finish it after the attempt either.
    late = started.http.get(started.callback_url, allow_redirects=False, timeout=10)
    assert late.status_code == 400 and '<code id="reason">state_invalid</code>' in late.text


def test_a_sign_in_the_user_cancels_at_the_provider_says_the_provider_refused(sso_server: SsoServer):
    http = browser()
    done = sign_in(sso_server.base_url, "fail-cancel", http=http, abort=True)
    assert query_of(done.callback_url)["error"] == "access_denied"
    event = assert_failure(sso_server, done.callback, status=403, reason="provider_error", ip=http.ip)  # type: ignore[attr-defined]
    assert "access_denied" in done.callback.text and "access_denied" in event["details"]["detail"]  # type: ignore[union-attr]
    assert event["outcome"] == "refused"


@pytest.mark.parametrize("code", ["used", "invented"])
def test_a_code_the_provider_does_not_know_with_a_fresh_state_is_rejected(sso_server: SsoServer, code):
    base = sso_server.base_url
    http = browser()
    first = sign_in(base, f"fail-code-{code}", http=http)
    assert first.tokens is not None
    used = query_of(first.callback_url)["code"]
    fresh = sign_in(base, f"fail-code-{code}", http=http, follow=False)  # same browser: a new, valid state
    query = query_of(fresh.callback_url)
    query["code"] = used if code == "used" else "not-a-code-the-provider-issued"
    answer = http.get(f"{base}{CALLBACK}?{urlencode(query)}", allow_redirects=False, timeout=10)
    assert_failure(sso_server, answer, status=400, reason="code_rejected", ip=http.ip,  # type: ignore[attr-defined]
                   secrets=(query["code"], query["state"]))


@pytest.mark.parametrize(("mode", "reason"), [
    ("tamper", "bad_signature"), ("wrong_aud", "wrong_audience"), ("wrong_iss", "wrong_issuer"),
    ("expired", "expired"), ("future_iat", "not_yet_valid"), ("no_nonce", "nonce_mismatch"),
    ("wrong_nonce", "nonce_mismatch"), ("hs256", "wrong_algorithm"), ("none_alg", "wrong_algorithm")])
def test_an_id_token_that_does_not_hold_is_refused_with_its_reason(sso_server: SsoServer, provider_mode, mode,
                                                                  reason):
    provider_mode(mode)
    http = browser()
    done = sign_in(sso_server.base_url, f"fail-{mode}", http=http)
    query = query_of(done.callback_url)
    assert_failure(sso_server, done.callback, status=400, reason=reason, ip=http.ip,  # type: ignore[attr-defined]
                   secrets=(query["code"], query["state"]))
    assert done.tokens is None


def test_the_redirect_uri_is_the_servers_own_whatever_the_query_says(sso_server: SsoServer):
    base = sso_server.base_url
    http = browser()
    start = http.get(f"{base}/api/auth/oidc/login", params={"redirect_uri": "http://127.0.0.1:9/api/auth/oidc/"
                                                                            "callback"},
                     allow_redirects=False, timeout=10)
    assert start.status_code == 302
    assert query_of(start.headers["Location"])["redirect_uri"] == f"{base}{CALLBACK}"
    done = sign_in(base, "fail-redirect", http=browser(), follow=False)
    query = {**query_of(done.callback_url), "redirect_uri": "http://127.0.0.1:9/api/auth/oidc/callback"}
    finished = done.http.get(f"{base}{CALLBACK}?{urlencode(query)}", allow_redirects=False, timeout=10)
    assert finished.status_code == 302 and finished.headers["Location"] == "/#/sso", finished.text


def test_starting_sign_ins_is_limited_per_client_address(sso_server: SsoServer):
    base = sso_server.base_url
    flood = browser()
    since = datetime.now(UTC)
    for number in range(30):
        started = flood.get(f"{base}/api/auth/oidc/login", allow_redirects=False, timeout=10)
        assert started.status_code == 302, (number, started.text)
    assert sso_server.rows_since("sso_loginattempt", since) == 30
    refused = flood.get(f"{base}/api/auth/oidc/login", allow_redirects=False, timeout=10)
    assert_failure(sso_server, refused, status=429, reason="rate_limited", ip=flood.ip)  # type: ignore[attr-defined]
    assert 1 <= int(refused.headers["Retry-After"]) <= 61
    assert sso_server.rows_since("sso_loginattempt", since) == 30  # a refused start stores nothing
    elsewhere = browser().get(f"{base}/api/auth/oidc/login", allow_redirects=False, timeout=10)
    assert elsewhere.status_code == 302


# --- a provider that goes away ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fragile() -> Iterator[tuple[OidcProvider, SsoServer]]:
    """A provider of its own (this module stops it) and a server that reads its discovery document at every
    step (AGENTSITE_OIDC_DISCOVERY_TTL=0, so a login finds it gone). One process (daphne alone): the point is
    the provider, not the workers, and it starts in 2 s rather than serve's 13."""
    provider = OidcProvider().start()
    server = LiveServer(command="daphne", env=sso_env(provider, AGENTSITE_OIDC_DISCOVERY_TTL="0"))
    try:
        server.start()
        yield provider, SsoServer(server)
    finally:
        server.stop()
        provider.stop()


def test_a_provider_down_at_the_callback_and_then_at_the_login_gives_the_unreachable_page(fragile):
    provider, server = fragile
    assert sign_in(server.base_url, "fail-down-before", http=browser()).tokens is not None
    started = sign_in(server.base_url, "fail-down", http=browser(), follow=False)
    provider.stop()
    query = query_of(started.callback_url)
    answer = started.http.get(started.callback_url, allow_redirects=False, timeout=30)
    assert_failure(server, answer, status=502, reason="provider_unreachable", ip=started.http.ip,  # type: ignore[attr-defined]
                   secrets=(query["code"], query["state"]))
    http = browser()
    login = http.get(f"{server.base_url}/api/auth/oidc/login", allow_redirects=False, timeout=30)
    assert_failure(server, login, status=502, reason="provider_unreachable", ip=http.ip)  # type: ignore[attr-defined]

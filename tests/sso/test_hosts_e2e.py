"""A sign-in spread over two hosts of one deployment (two `serve` servers on one PostgreSQL database and one Redis):
started on the first, called back and collected on the second, signed out on the first. Every state of a sign-in
lives in the database, so no step needs the host that made the one before. PostgreSQL + Redis only (CI's second
pass): on SQLite a database is one host's."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest
import requests

from tests.oidc.harness import OidcProvider, sign_in
from tests.server import TwoHosts, two_hosts_possible
from tests.sso.conftest import browser, sso_env

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(
    not two_hosts_possible(), reason="two hosts share PostgreSQL and Redis (set DATABASE_URL to PostgreSQL and "
                                     "REDIS_URL; CI's second pass does)")]


@pytest.fixture(scope="module")
def hosts(oidc_provider: OidcProvider) -> Iterator[TwoHosts]:
    pair = TwoHosts(env=sso_env(oidc_provider)).start()
    try:
        yield pair
    finally:
        pair.stop()


def on(base_url: str, url: str) -> str:
    """url with base_url's host and port (the load balancer sent the request to that host)."""
    return urlunsplit(urlsplit(url)._replace(netloc=urlsplit(base_url).netloc))


def test_a_sign_in_started_on_one_host_finishes_on_the_other_and_signs_out_on_the_first(hosts: TwoHosts):
    first, second = hosts.first.base_url, hosts.second.base_url
    started = sign_in(first, "hosts-ada", http=browser(), follow=False)
    assert started.login is not None and started.login.status_code == 302
    called_back = started.http.get(on(second, started.callback_url), allow_redirects=False, timeout=30)
    assert called_back.status_code == 302 and called_back.headers["Location"] == "/#/sso", called_back.text
    collected = started.http.post(f"{second}/api/auth/oidc/session", timeout=10)
    assert collected.status_code == 200, collected.text
    tokens = collected.json()
    headers = {"Authorization": f"Bearer {tokens['token']}"}
    assert requests.get(f"{first}/api/auth/me", headers=headers, timeout=10).json()["username"] == "hosts-ada"

    out = requests.post(f"{first}/api/auth/oidc/logout", json={"refresh": tokens["refresh"]}, headers=headers,
                        timeout=10)
    assert out.status_code == 200 and out.json()["end_session_url"], out.text  # the second host's session row
    for host in (first, second):
        assert requests.get(f"{host}/api/auth/me", headers=headers, timeout=10).status_code == 401, host
    refreshed = requests.post(f"{second}/api/auth/refresh", json={"refresh": tokens["refresh"]}, timeout=10)
    assert refreshed.status_code == 401, refreshed.text


def test_a_state_used_on_one_host_is_spent_on_the_other(hosts: TwoHosts):
    first, second = hosts.first.base_url, hosts.second.base_url
    done = sign_in(first, "hosts-bea", http=browser())
    assert done.tokens is not None
    replayed = done.http.get(on(second, done.callback_url), allow_redirects=False, timeout=30)
    assert replayed.status_code == 400 and '<code id="reason">state_invalid</code>' in replayed.text

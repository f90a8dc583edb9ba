"""A whole OpenID Connect sign-in against the test provider (tests/oidc), as a browser would make it (requests): the
callback, the ticket cookie, the token pair and its refresh, the sign-out through the provider; ES256 ID tokens
and the provider's key rotation; the login and its callback answered by different workers of one `serve`."""

from __future__ import annotations

from collections.abc import Iterator
from http.cookies import SimpleCookie
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from tests.oidc.harness import CLIENT_ID, CLIENT_ID_ES256, OidcProvider, sign_in
from tests.server import LiveServer
from tests.sso.conftest import SsoServer, browser, jwt_part, sso_env

pytestmark = pytest.mark.e2e

TICKET_COOKIE = "agentsite_sso_ticket"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def ticket_cookie(response: requests.Response) -> SimpleCookie:
    cookie = SimpleCookie()
    cookie.load(response.headers["Set-Cookie"])
    assert TICKET_COOKIE in cookie, response.headers["Set-Cookie"]
    return cookie


def test_a_sign_in_hands_the_dashboard_a_single_use_ticket_cookie_for_a_working_token_pair(sso_server: SsoServer):
    base = sso_server.base_url
    done = sign_in(base, "flow-ada", http=browser(), collect=False)
    assert done.callback is not None and done.callback.status_code == 302, done.callback and done.callback.text
    assert done.callback.headers["Location"] == "/#/sso"
    assert done.callback.headers["Cache-Control"] == "no-store"
    raw = done.callback.headers["Set-Cookie"]
    ticket = ticket_cookie(done.callback)[TICKET_COOKIE]
    assert (ticket["path"], ticket["samesite"], ticket["max-age"]) == ("/api/auth/oidc/session", "Lax", "60")
    assert "HttpOnly" in raw and ticket["httponly"] is True
    assert ticket.value not in done.callback.headers["Location"]

    collected = done.http.post(f"{base}/api/auth/oidc/session", timeout=10)
    assert collected.status_code == 200, collected.text
    body = collected.json()
    assert body["sso"] is True and body["user"]["username"] == "flow-ada"
    assert collected.headers["Cache-Control"] == "no-store"
    me = requests.get(f"{base}/api/auth/me", headers=bearer(body["token"]), timeout=10)
    assert me.status_code == 200 and me.json()["username"] == "flow-ada", me.text

    # Once only: the same cookie again (a copy an attacker kept) finds nothing.
    again = requests.post(f"{base}/api/auth/oidc/session", cookies={TICKET_COOKIE: ticket.value}, timeout=10)
    assert again.status_code == 401 and again.json()["error"]["code"] == "token_invalid", again.text

    logins = sso_server.audit("auth.login", actor="flow-ada")
    assert logins and logins[0]["details"]["method"] == "oidc" and logins[0]["outcome"] == "success", logins
    assert logins[0]["ip"] == done.http.ip  # type: ignore[attr-defined]


def test_the_refreshed_pair_stays_an_sso_one_and_sign_out_revokes_it_and_reaches_the_provider(
        sso_server: SsoServer, oidc_provider: OidcProvider):
    base = sso_server.base_url
    tokens = sign_in(base, "flow-bea", http=browser()).tokens
    assert tokens is not None
    sso_key = jwt_part(tokens["refresh"], 1)["sso"]
    refreshed = requests.post(f"{base}/api/auth/refresh", json={"refresh": tokens["refresh"]}, timeout=10)
    assert refreshed.status_code == 200, refreshed.text
    pair = refreshed.json()
    assert jwt_part(pair["refresh"], 1)["sso"] == sso_key

    out = requests.post(f"{base}/api/auth/oidc/logout", json={"refresh": pair["refresh"]},
                        headers=bearer(pair["token"]), timeout=10)
    assert out.status_code == 200, out.text
    url = out.json()["end_session_url"]
    parts = urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == f"{oidc_provider.issuer}/session/end"
    query = {name: values[0] for name, values in parse_qs(parts.query).items()}
    assert query["post_logout_redirect_uri"] == f"{base}/" and query["client_id"] == CLIENT_ID
    hint = jwt_part(query["id_token_hint"], 1)
    assert (hint["sub"], hint["aud"], hint["iss"]) == ("flow-bea", CLIENT_ID, oidc_provider.issuer)

    # The pair is revoked: neither the access token nor the refresh token works any more.
    assert requests.get(f"{base}/api/auth/me", headers=bearer(pair["token"]), timeout=10).status_code == 401
    reuse = requests.post(f"{base}/api/auth/refresh", json={"refresh": pair["refresh"]}, timeout=10)
    assert reuse.status_code == 401, reuse.text

    # The browser goes there next: the provider sees the hint and accepts the way back.
    ended = requests.get(url, allow_redirects=False, timeout=10)
    assert ended.status_code == 200, ended.text
    assert any(entry["path"] == "/session/end" and entry["query"].get("id_token_hint") == query["id_token_hint"]
               for entry in oidc_provider.log())


def test_signing_out_of_a_password_session_through_the_sso_door_has_no_provider_to_visit(sso_server: SsoServer):
    base = sso_server.base_url
    pair = sso_server.server.login()
    out = requests.post(f"{base}/api/auth/oidc/logout", json={"refresh": pair["refresh"]},
                        headers=bearer(pair["token"]), timeout=10)
    assert out.status_code == 200 and out.json() == {"end_session_url": None}, out.text
    assert requests.get(f"{base}/api/auth/me", headers=bearer(pair["token"]), timeout=10).status_code == 401


def test_a_login_and_its_callback_answered_by_different_workers_sign_in(sso_server: SsoServer):
    # The login's state lives in the database: a callback another worker answers finds it. Each request on a
    # new connection, so that the kernel hands it to any of serve's workers.
    seen: list[tuple[str | None, str | None]] = []
    for number in range(16):
        done = sign_in(sso_server.base_url, f"flow-worker-{number}", http=browser(close=True))
        assert done.tokens is not None, done.callback and done.callback.text
        seen.append(done.workers())
        if seen[-1][0] != seen[-1][1]:
            break
    assert all(login and callback for login, callback in seen), f"no worker header: {seen}"
    assert any(login != callback for login, callback in seen), \
        f"every login and its callback went to one worker in {len(seen)} sign-ins: {seen}"


# --- one process: the key set it keeps ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def es_server(oidc_provider: OidcProvider) -> Iterator[SsoServer]:
    # One process (daphne alone): the rotation test needs the process that answers the callback to be the one
    # that kept the old key set, which a sign-in before it makes sure of.
    server = LiveServer(command="daphne", env=sso_env(oidc_provider, AGENTSITE_OIDC_CLIENT_ID=CLIENT_ID_ES256))
    server.start()
    try:
        yield SsoServer(server)
    finally:
        server.stop()


def _id_token_of(server: SsoServer, tokens: dict) -> str:
    """The ID token a sign-in received, as its sign-out hands it to the provider (id_token_hint)."""
    out = requests.post(f"{server.base_url}/api/auth/oidc/logout", json={"refresh": tokens["refresh"]},
                        headers=bearer(tokens["token"]), timeout=10)
    assert out.status_code == 200, out.text
    return parse_qs(urlsplit(out.json()["end_session_url"]).query)["id_token_hint"][0]


def test_a_client_whose_id_tokens_are_es256_signs_in(es_server: SsoServer):
    tokens = sign_in(es_server.base_url, "flow-es", http=browser()).tokens
    assert tokens is not None and tokens["user"]["username"] == "flow-es"
    id_token = _id_token_of(es_server, tokens)
    assert jwt_part(id_token, 0)["alg"] == "ES256" and jwt_part(id_token, 1)["aud"] == CLIENT_ID_ES256


def test_a_rotated_key_is_fetched_again_and_a_key_never_published_is_refused(es_server: SsoServer, provider_mode):
    base = es_server.base_url
    assert sign_in(base, "flow-rotate", http=browser()).tokens is not None  # the process keeps the key set now
    provider_mode("new_key")
    rotated = sign_in(base, "flow-rotate", http=browser())
    assert rotated.tokens is not None, rotated.callback and rotated.callback.text
    assert jwt_part(_id_token_of(es_server, rotated.tokens), 0)["kid"].startswith("rsa-rotated-")

    provider_mode("unpublished_key")
    http = browser()
    refused = sign_in(base, "flow-rotate", http=http)
    assert refused.callback is not None and refused.callback.status_code == 400
    assert '<code id="reason">unknown_key</code>' in refused.callback.text
    events = es_server.audit_from("auth.sso_failed", http.ip)  # type: ignore[attr-defined]
    assert [event["details"]["reason"] for event in events] == ["unknown_key"], events

"""Who a sign-in through the real OpenID provider (tests/oidc) becomes on a real server (serve, its default
workers): the account and its groups made at the first sign-in, the membership replaced when the provider moves
the user, admin granted and taken back by the admin group, and the refusals (outside the allowed groups, a
deactivated user) answered with the failure page and nothing made."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.oidc.harness import OidcProvider, oidc_env, sign_in
from tests.server import LiveServer

pytestmark = pytest.mark.e2e

ADMINS, ALLOWED = "idp-admins", ("engineering", "sales", "idp-admins")


@pytest.fixture(scope="module")
def idp() -> Iterator[OidcProvider]:
    provider = OidcProvider().start()
    yield provider
    provider.stop()


@pytest.fixture(scope="module")
def server(idp: OidcProvider) -> Iterator[LiveServer]:
    live = LiveServer(env=oidc_env(idp, AGENTSITE_OIDC_CREATE_GROUPS="1", AGENTSITE_OIDC_ADMIN_GROUPS=ADMINS,
                                   AGENTSITE_OIDC_ALLOWED_GROUPS=",".join(ALLOWED))).start()
    yield live
    live.stop()


def api(server: LiveServer, token: str, method: str, path: str, **kwargs: Any) -> requests.Response:
    return requests.request(method, f"{server.base_url}{path}", headers={"Authorization": f"Bearer {token}"},
                            timeout=10, **kwargs)


def signed_in(server: LiveServer, login: str) -> dict[str, Any]:
    """The sign-in's token pair and user; fails naming the page's reason when it was refused."""
    done = sign_in(server.base_url, login)
    assert done.callback is not None and done.callback.status_code == 302, (
        done.callback.status_code if done.callback is not None else None, reason_of(done.callback))
    assert done.tokens is not None, "the dashboard could not collect the sign-in"
    return done.tokens


def reason_of(response: requests.Response | None) -> str | None:
    found = re.search(r'<code id="reason">([a-z_]+)</code>', response.text) if response is not None else None
    return found.group(1) if found else None


def me(server: LiveServer, tokens: dict[str, Any]) -> dict[str, Any]:
    answer = api(server, tokens["token"], "GET", "/api/auth/me")
    assert answer.status_code == 200, answer.text
    return answer.json()


def users_named(server: LiveServer, username: str) -> list[dict[str, Any]]:
    admin = server.login()["token"]
    body = api(server, admin, "GET", "/api/users", params={"search": username}).json()
    return [row for row in body.get("results", body) if row["username"] == username]


def test_the_first_sign_in_makes_the_user_with_the_providers_groups_and_the_next_replaces_them(idp, server):
    idp.account("s-alice", preferred_username="alice", email="alice@example.com", given_name="Alice",
                groups=["engineering"])
    first = signed_in(server, "s-alice")
    assert first["user"]["username"] == "alice" and first["user"]["is_admin"] is False and first["sso"] is True
    assert [group["name"] for group in me(server, first)["groups"]] == ["engineering"]
    admin = server.login()["token"]
    listed = {group["name"]: group["source"] for group in api(server, admin, "GET", "/api/groups").json()}
    assert listed.get("engineering") == "oidc", listed

    idp.account("s-alice", preferred_username="alice-renamed", email="alice@example.com", groups=["sales"])
    second = signed_in(server, "s-alice")
    assert second["user"]["id"] == first["user"]["id"] and second["user"]["username"] == "alice"
    assert [group["name"] for group in me(server, second)["groups"]] == ["sales"]
    assert [group["name"] for group in me(server, first)["groups"]] == ["sales"]  # the user's, whichever token


def test_the_admin_group_grants_admin_and_leaving_it_takes_admin_away(idp, server):
    idp.account("s-bob", preferred_username="bob", groups=["engineering", ADMINS])
    granted = signed_in(server, "s-bob")
    assert granted["user"]["is_admin"] is True and me(server, granted)["is_admin"] is True
    assert api(server, granted["token"], "GET", "/api/users").status_code == 200

    idp.account("s-bob", preferred_username="bob", groups=["engineering"])
    taken = signed_in(server, "s-bob")
    assert taken["user"]["id"] == granted["user"]["id"] and taken["user"]["is_admin"] is False
    assert me(server, taken)["is_admin"] is False
    refused = api(server, taken["token"], "GET", "/api/users")
    assert refused.status_code == 403, refused.text


def test_a_user_outside_the_allowed_groups_is_refused_with_the_page_and_nothing_is_made(idp, server):
    idp.account("s-carol", preferred_username="carol", groups=["visitors"])
    done = sign_in(server.base_url, "s-carol")
    assert done.callback is not None and done.callback.status_code == 403
    assert done.callback.headers["Content-Type"].startswith("text/html") and done.tokens is None
    assert reason_of(done.callback) == "not_allowed"
    assert "engineering" in done.callback.text  # says who may sign in
    assert users_named(server, "carol") == []
    admin = server.login()["token"]
    assert "visitors" not in {group["name"] for group in api(server, admin, "GET", "/api/groups").json()}


def test_a_user_deactivated_here_cannot_sign_in_through_the_provider(idp, server):
    idp.account("s-dan", preferred_username="dan", groups=["engineering"])
    user_id = signed_in(server, "s-dan")["user"]["id"]
    admin = server.login()["token"]
    assert api(server, admin, "PATCH", f"/api/users/{user_id}", json={"is_active": False}).status_code == 200
    idp.account("s-dan", preferred_username="dan", groups=["sales"])
    done = sign_in(server.base_url, "s-dan")
    assert done.callback is not None and done.callback.status_code == 403 and done.tokens is None
    assert reason_of(done.callback) == "deactivated"
    assert api(server, admin, "PATCH", f"/api/users/{user_id}", json={"is_active": True}).status_code == 200
    back = signed_in(server, "s-dan")
    assert back["user"]["id"] == user_id
    assert [group["name"] for group in me(server, back)["groups"]] == ["sales"]

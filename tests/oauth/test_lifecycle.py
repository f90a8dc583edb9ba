"""How the tokens agentsite issues end before their time, in process: an app disconnected (by its user or an
admin), revoked by the app (/oauth/revoke), the user's password changed (the API, Django admin, manage.py
changepassword), the user deactivated or deleted. Each way refuses the token at once (oauth.tokens, what /mcp
and its open streams ask), marks its row revoked (or removes it) so the app leaves the connected apps, and
makes a refresh fail. The same across processes is test_lifecycle_e2e.py's."""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.test import Client as DjangoClient
from rest_framework.test import APIClient

from oauth import tokens as oauth_tokens
from oauth.models import AccessToken
from tests.conftest import PASSWORD, client_for

pytestmark = pytest.mark.django_db

RESOURCE = "http://testserver/mcp"
REDIRECT = "http://127.0.0.1:9/callback"


@dataclass
class Connected:
    """An app connected to a user's account through the real flow, and the tokens it holds."""

    client_id: str
    access: str
    refresh: str


def register(name: str = "Test connector") -> str:
    """A public client registered as a connector does; its client_id."""
    answer = APIClient().post("/oauth/register", {
        "client_name": name, "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"]}, format="json")
    assert answer.status_code == 201, answer.content
    return answer.json()["client_id"]


def consent_for(client_id: str) -> tuple[str, str]:
    """(consent id, PKCE verifier) of a new authorization request of the client."""
    verifier = secrets.token_urlsafe(40)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    answer = APIClient().get("/oauth/authorize?" + urlencode({
        "response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT, "code_challenge": challenge,
        "code_challenge_method": "S256", "resource": RESOURCE, "state": "st", "scope": "mcp"}))
    assert answer.status_code == 302 and "/#/consent/" in answer["Location"], answer.content
    return answer["Location"].rsplit("/", 1)[1], verifier


def connect(user, client_id: str | None = None, name: str = "Test connector") -> Connected:
    """The whole flow: registration (unless client_id), authorization, the user's consent, the code's exchange."""
    client_id = client_id or register(name)
    consent, verifier = consent_for(client_id)
    decided = client_for(user).post(f"/api/oauth/consents/{consent}", {"allow": True}, format="json")
    assert decided.status_code == 200, decided.content
    code = parse_qs(urlsplit(decided.json()["redirect_to"]).query)["code"][0]
    answer = APIClient().post("/oauth/token", {
        "grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT, "code_verifier": verifier,
        "client_id": client_id})
    assert answer.status_code == 200, answer.content
    body = answer.json()
    return Connected(client_id, body["access_token"], body["refresh_token"])


def refreshed(app: Connected) -> APIClient:
    return APIClient().post("/oauth/token", {"grant_type": "refresh_token", "refresh_token": app.refresh,
                                             "client_id": app.client_id})


def refused(access: str) -> str | None:
    """Why the token is refused at /mcp (None: it stands), and the same answer for a stream opened with it."""
    try:
        grant = async_to_sync(oauth_tokens.aauthenticate)(access, resource=RESOURCE)
    except oauth_tokens.TokenRefused as exc:
        assert async_to_sync(oauth_tokens.problem)(oauth_tokens.TokenCredential(
            oauth_tokens.key_digest(access), RESOURCE)) == exc.detail
        return exc.detail
    assert async_to_sync(oauth_tokens.problem)(grant.credential) is None
    return None


def apps_of(user) -> list[str]:
    answer = client_for(user).get("/api/oauth/apps")
    assert answer.status_code == 200, answer.content
    return [app["client_id"] for app in answer.json()["results"]]


@pytest.fixture(autouse=True)
def _fresh_token_cache():
    oauth_tokens.tokens.drop(None)
    yield
    oauth_tokens.tokens.drop(None)


# --- each way a token ends --------------------------------------------------------------------------------

def test_a_connected_app_s_token_stands_and_is_cached(owner):
    app = connect(owner)
    assert refused(app.access) is None
    assert oauth_tokens.tokens.fresh(oauth_tokens.key_digest(app.access))[0], "the token was not cached"
    assert apps_of(owner) == [app.client_id]


def test_disconnecting_the_app_ends_its_cached_token_at_once_and_its_refresh(owner):
    app = connect(owner)
    assert refused(app.access) is None  # cached now
    assert client_for(owner).delete(f"/api/oauth/apps/{app.client_id}").status_code == 204
    assert refused(app.access) == "The access token was revoked."
    assert apps_of(owner) == []
    answer = refreshed(app)
    assert answer.status_code == 400 and answer.json()["error"] == "invalid_grant"


def test_an_admin_disconnects_another_user_s_app_with_the_user_parameter(owner, admin):
    app = connect(owner)
    assert refused(app.access) is None
    answer = client_for(admin).delete(f"/api/oauth/apps/{app.client_id}?user={owner.pk}")
    assert answer.status_code == 204
    assert refused(app.access) == "The access token was revoked."


def test_the_app_revoking_its_refresh_token_ends_the_cached_access_token(owner):
    app = connect(owner)
    assert refused(app.access) is None
    answer = APIClient().post("/oauth/revoke", {"token": app.refresh, "token_type_hint": "refresh_token",
                                                "client_id": app.client_id})
    assert answer.status_code == 200, answer.content
    assert refused(app.access) == "The access token was revoked."
    assert apps_of(owner) == []


def test_another_client_cannot_revoke_an_app_s_token(owner):
    app, stranger = connect(owner), register("Stranger")
    answer = APIClient().post("/oauth/revoke", {"token": app.access, "client_id": stranger})
    assert answer.status_code in (200, 400), answer.content
    assert refused(app.access) is None
    assert apps_of(owner) == [app.client_id]


def _change_password_through_the_api(user) -> None:
    answer = client_for(user).post("/api/auth/change-password", {"old_password": PASSWORD,
                                                                 "new_password": PASSWORD + "-new"}, format="json")
    assert answer.status_code == 200, answer.content


def _change_password_in_django_admin(user) -> None:
    from django.contrib.auth import get_user_model

    admin = get_user_model().objects.create_superuser(username="operator", password=PASSWORD, email="")
    browser = DjangoClient()
    browser.force_login(admin)
    answer = browser.post(f"/admin/auth/user/{user.pk}/password/", {
        "password1": PASSWORD + "-admin", "password2": PASSWORD + "-admin", "usable_password": "true"})
    assert answer.status_code == 302, answer.content[:2000]


def _change_password_with_manage_py(user, monkeypatch) -> None:
    from django.contrib.auth.management.commands import changepassword

    monkeypatch.setattr(changepassword.Command, "_get_pass", lambda self, prompt="": PASSWORD + "-shell")
    call_command("changepassword", user.username, stdout=None)


def _deactivate(user) -> None:
    user.is_active = False
    user.save()


@pytest.mark.parametrize("change", ["api", "django admin", "manage.py changepassword", "deactivation"])
def test_a_password_change_or_a_deactivation_ends_the_user_s_tokens_and_their_grants(owner, other_user, change,
                                                                                   monkeypatch):
    app, others = connect(owner), connect(other_user)
    assert refused(app.access) is None and refused(others.access) is None
    {"api": _change_password_through_the_api, "django admin": _change_password_in_django_admin,
     "deactivation": _deactivate,
     "manage.py changepassword": lambda user: _change_password_with_manage_py(user, monkeypatch)}[change](owner)
    assert refused(app.access) in ("The access token was revoked.", "The access token's user was deactivated.")
    row = AccessToken.objects.get(access_hash=oauth_tokens.key_digest(app.access))
    assert row.revoked_at is not None, "the grant was refused but not revoked: the app stays listed"
    assert refreshed(app).json()["error"] == "invalid_grant"
    assert refused(others.access) is None, "another user's token ended too"
    owner.refresh_from_db()
    if owner.is_active:
        assert apps_of(owner) == []


def test_a_token_issued_after_the_password_change_stands(owner):
    _change_password_through_the_api(owner)
    owner.refresh_from_db()
    app = connect(owner)
    assert refused(app.access) is None
    owner.first_name = "Renamed"
    owner.save()  # a save that changes neither the password nor is_active ends nothing
    assert refused(app.access) is None


def test_a_login_ends_no_token(owner):
    app = connect(owner)
    assert APIClient().post("/api/auth/login", {"username": "owner", "password": PASSWORD},
                            format="json").status_code == 200
    assert refused(app.access) is None and apps_of(owner) == [app.client_id]


def test_deleting_the_user_ends_their_cached_tokens_at_once(owner):
    app = connect(owner)
    assert refused(app.access) is None
    owner.delete()
    assert refused(app.access) == "The access token is not known."
    assert not AccessToken.objects.exists()


def test_a_refresh_token_used_twice_ends_the_grant_and_the_cached_new_token(owner):
    app = connect(owner)
    first = refreshed(app)
    assert first.status_code == 200, first.content
    newer = first.json()["access_token"]
    assert refused(newer) is None
    assert refused(app.access) == "The access token was revoked.", "a refresh leaves the old access token alive"
    again = refreshed(app)
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"
    assert refused(newer) == "The access token was revoked."
    assert apps_of(owner) == []


# --- reuse detection is audited -------------------------------------------------------------------------------

def test_a_refresh_token_presented_again_is_audited_as_token_reuse(owner):
    from accounts.models import AuditEvent

    app = connect(owner)
    assert refreshed(app).status_code == 200
    assert refreshed(app).status_code == 400
    event = AuditEvent.objects.get(action="oauth.token_reuse")
    assert event.outcome == "refused" and event.target == f"oauth_client:{app.client_id}"
    assert event.details["user_id"] == owner.pk

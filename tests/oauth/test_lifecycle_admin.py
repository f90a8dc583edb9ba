"""The oauth rows in Django admin: shown read-only and without a secret (no hash, no password version),
deletable by a superuser only; the token list's "Revoke" action ends the selected grants the way every
revocation does (the cached token refused at once, the app gone from the connected apps), audited; deleting a
client, a token or a user ends the tokens too."""

from __future__ import annotations

import pytest
from django.test import Client as Browser

from accounts.models import AuditEvent
from oauth import tokens as oauth_tokens
from oauth.models import AccessToken, AuthorizationCode, Client, ConsentRequest
from tests.oauth.test_lifecycle import apps_of, connect, consent_for, refused, register

pytestmark = pytest.mark.django_db

PAGES = {"client": Client, "consentrequest": ConsentRequest, "authorizationcode": AuthorizationCode,
         "accesstoken": AccessToken}


@pytest.fixture
def browser(admin) -> Browser:
    browser = Browser()
    browser.force_login(admin)
    return browser


@pytest.fixture(autouse=True)
def _fresh_token_cache():
    oauth_tokens.tokens.drop(None)
    yield
    oauth_tokens.tokens.drop(None)


def _secrets_kept() -> list[str]:
    kept = [*Client.objects.exclude(secret_hash="").values_list("secret_hash", flat=True),
            *AuthorizationCode.objects.values_list("code_hash", flat=True)]
    for access, refresh, version in AccessToken.objects.values_list("access_hash", "refresh_hash", "password_version"):
        kept += [access, refresh, version]
    return kept


def test_every_oauth_page_shows_its_rows_and_no_secret(browser, owner):
    app = connect(owner)
    consent_for(app.client_id)  # a consent waiting
    confidential = Browser().post("/oauth/register", {"redirect_uris": ["https://app.example/cb"],
                                                      "token_endpoint_auth_method": "client_secret_post"},
                                  content_type="application/json")
    assert confidential.status_code == 201
    kept = _secrets_kept()
    assert len(kept) >= 5
    for name, model in PAGES.items():
        listing = browser.get(f"/admin/oauth/{name}/")
        assert listing.status_code == 200, name
        row = model.objects.first()
        page = browser.get(f"/admin/oauth/{name}/{row.pk}/change/")
        assert page.status_code == 200, name
        for html in (listing.content.decode(), page.content.decode()):
            assert not [secret for secret in kept if secret and secret in html], f"a secret is shown on {name}"
            assert "hash" not in html.lower().replace("#", ""), f"a hash field is shown on {name}"
    assert confidential.json()["client_secret"] not in browser.get("/admin/oauth/client/").content.decode()


def test_the_rows_cannot_be_added_or_edited_here(browser, owner):
    app = connect(owner)
    token = AccessToken.objects.get()
    for name in PAGES:
        assert browser.get(f"/admin/oauth/{name}/add/").status_code == 403
    answer = browser.post(f"/admin/oauth/accesstoken/{token.pk}/change/", {"scope": "admin", "revoked_at": ""})
    assert answer.status_code == 403
    assert AccessToken.objects.get().scope == "mcp" and refused(app.access) is None


def test_a_token_deleted_here_ends_at_once_and_is_audited(browser, owner):
    app = connect(owner)
    assert refused(app.access) is None
    token = AccessToken.objects.get()
    answer = browser.post(f"/admin/oauth/accesstoken/{token.pk}/delete/", {"post": "yes"})
    assert answer.status_code == 302, answer.content[:2000]
    assert refused(app.access) == "The access token is not known."
    event = AuditEvent.objects.get(action="oauth.revoke")
    assert event.details == {"user_id": owner.pk, "row_deleted": True}


def test_a_staff_member_who_is_not_a_superuser_cannot_delete_oauth_rows(owner, django_user_model):
    from django.contrib.auth.models import Permission

    connect(owner)
    staff = django_user_model.objects.create_user(username="staff", password="x", is_staff=True)
    staff.user_permissions.set(Permission.objects.filter(content_type__app_label="oauth"))
    browser = Browser()
    browser.force_login(staff)
    assert browser.get("/admin/oauth/accesstoken/").status_code == 200
    token = AccessToken.objects.get()
    assert browser.post(f"/admin/oauth/accesstoken/{token.pk}/delete/", {"post": "yes"}).status_code == 403
    assert AccessToken.objects.exists()


def test_a_user_with_connected_apps_can_still_be_deleted_in_django_admin_and_their_tokens_end(browser, owner):
    app = connect(owner)
    assert refused(app.access) is None
    answer = browser.post(f"/admin/auth/user/{owner.pk}/delete/", {"post": "yes"})
    assert answer.status_code == 302, answer.content[:2000]
    assert refused(app.access) == "The access token is not known."


def test_the_revoke_action_ends_the_selected_grants_at_once_and_is_audited(browser, owner, other_user):
    mine, theirs = connect(owner, name="mine"), connect(other_user, name="theirs")
    assert refused(mine.access) is None and refused(theirs.access) is None  # both cached
    selected = AccessToken.objects.get(user=owner)
    answer = browser.post("/admin/oauth/accesstoken/", {"action": "revoke", "_selected_action": [selected.pk]})
    assert answer.status_code == 302, answer.content[:2000]
    assert refused(mine.access) == "The access token was revoked."
    assert refused(theirs.access) is None
    assert apps_of(owner) == [] and apps_of(other_user) == [theirs.client_id]
    event = AuditEvent.objects.get(action="oauth.revoke")
    assert event.door == "admin" and event.target == f"oauth_client:{mine.client_id}"
    assert event.details == {"user_id": owner.pk}


def test_the_revoke_action_ends_the_whole_grant_of_a_rotated_row(browser, owner):
    from tests.oauth.test_lifecycle import refreshed

    app = connect(owner)
    newer = refreshed(app).json()["access_token"]
    assert refused(newer) is None
    old = AccessToken.objects.get(access_hash=oauth_tokens.key_digest(app.access))
    browser.post("/admin/oauth/accesstoken/", {"action": "revoke", "_selected_action": [old.pk]})
    assert refused(newer) == "The access token was revoked."


def test_deleting_a_client_ends_its_cached_tokens_and_is_audited(browser, owner):
    app = connect(owner)
    assert refused(app.access) is None
    client = Client.objects.get(client_id=app.client_id)
    answer = browser.post(f"/admin/oauth/client/{client.pk}/delete/", {"post": "yes"})
    assert answer.status_code == 302, answer.content[:2000]
    assert refused(app.access) == "The access token is not known."
    assert apps_of(owner) == []
    event = AuditEvent.objects.get(action="oauth.revoke")
    assert event.details["client_deleted"] is True and event.door == "admin"


def test_deleting_clients_in_bulk_ends_their_tokens(browser, owner):
    first, second = connect(owner), connect(owner)
    unused = register("unused")
    assert refused(first.access) is None and refused(second.access) is None
    pks = list(Client.objects.values_list("pk", flat=True))
    answer = browser.post("/admin/oauth/client/", {"action": "delete_selected", "_selected_action": pks,
                                                   "post": "yes"})
    assert answer.status_code == 302, answer.content[:2000]
    assert refused(first.access) == refused(second.access) == "The access token is not known."
    assert not Client.objects.exists()
    assert AuditEvent.objects.filter(action="oauth.revoke").count() == 3 and unused

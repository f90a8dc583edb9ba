"""GET /api/oauth/apps and DELETE /api/oauth/apps/:client_id: what a user (or an admin, for a user) sees of the apps
connected to the account, and who may disconnect them. An app shows while it holds a live grant; it connected
when the grant's first token was issued and was last used when any of its tokens was, refreshes included."""

from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.services import key_create
from oauth import tokens as oauth_tokens
from oauth.models import AccessToken
from tests.conftest import client_for
from tests.e2e import poll
from tests.oauth.test_lifecycle import RESOURCE, connect, refreshed, refused, register

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_token_state():
    oauth_tokens.tokens.drop(None)
    oauth_tokens.last_used._touched.clear()  # ids a rolled-back database hands out again
    yield
    oauth_tokens.tokens.drop(None)
    oauth_tokens.last_used._touched.clear()


def _key_client(user, scopes: list[str]) -> APIClient:
    _, secret = key_create(user=user, name="script", scopes=scopes)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def _use(access: str) -> None:
    """Present the token to /mcp's check (which hands its last use to the writer thread)."""
    async_to_sync(oauth_tokens.aauthenticate)(access, resource=RESOURCE)


def _rows(access: str):
    return AccessToken.objects.filter(access_hash=oauth_tokens.key_digest(access))


def test_the_listing_shows_each_app_once_with_its_user_scope_resource_and_times(owner):
    app = connect(owner, name="Claude")
    again = connect(owner, client_id=app.client_id)  # a second grant of the same app: still one entry
    answer = client_for(owner).get("/api/oauth/apps")
    assert answer.status_code == 200
    results = answer.json()["results"]
    assert [entry["client_id"] for entry in results] == [app.client_id]
    entry = results[0]
    assert set(entry) == {"client_id", "name", "redirect_host", "scope", "resource", "resources", "user",
                          "connected_at", "last_used_at", "expires_at"}
    assert entry["name"] == "Claude" and entry["redirect_host"] == "127.0.0.1:9" and entry["scope"] == "mcp"
    assert entry["resource"] == RESOURCE and entry["resources"] == [RESOURCE]
    assert entry["user"] == {"id": owner.pk, "username": "owner"}
    assert entry["last_used_at"] is None
    first = AccessToken.objects.order_by("issued_at").first()
    assert entry["connected_at"].startswith(first.issued_at.isoformat()[:19])
    latest = _rows(again.access).get().refresh_expires_at
    assert entry["expires_at"].startswith(latest.isoformat()[:19])
    assert not any(value for key, value in entry.items() if "hash" in key or "token" in key)


@pytest.mark.django_db(transaction=True)  # the writer thread's connection sees committed rows only
def test_last_use_is_written_off_the_request_at_most_once_a_minute_per_process_and_listed(owner):
    app, other = connect(owner, name="app"), connect(owner, name="other")
    app_row = _rows(app.access).get()
    _use(app.access)
    poll(lambda: _rows(app.access).get().last_used_at is not None, "the token's last use written")
    earlier = timezone.now() - timedelta(hours=1)
    _rows(app.access).update(last_used_at=earlier)
    oauth_tokens.last_used._touched[app_row.pk] -= 59  # 59 s after the last write: not yet
    _use(app.access)
    _use(other.access)  # written by the writer's next round, which would carry the first one's too
    poll(lambda: _rows(other.access).get().last_used_at is not None, "the other token's last use written")
    assert _rows(app.access).get().last_used_at == earlier, "a use within the minute was written"
    oauth_tokens.last_used._touched[app_row.pk] -= 2  # 61 s after
    _use(app.access)
    poll(lambda: _rows(app.access).get().last_used_at > earlier, "the token's use a minute later written")
    listed = {entry["name"]: entry["last_used_at"] for entry in client_for(owner).get("/api/oauth/apps").json()[
        "results"]}
    assert listed["app"] == _rows(app.access).get().last_used_at.isoformat().replace("+00:00", "Z")


def test_an_app_refreshed_since_its_last_use_keeps_its_first_connection_and_last_use(owner):
    app = connect(owner)
    used = timezone.now() - timedelta(minutes=3)
    _rows(app.access).update(last_used_at=used)
    first_issued = _rows(app.access).get().issued_at
    assert refreshed(app).status_code == 200
    entry = client_for(owner).get("/api/oauth/apps").json()["results"][0]
    assert entry["last_used_at"] == used.isoformat().replace("+00:00", "Z")
    assert entry["connected_at"] == first_issued.isoformat().replace("+00:00", "Z")


def test_apps_are_listed_most_recently_used_first_and_unused_ones_by_when_they_connected(owner):
    used_long_ago, unused, used_lately = (connect(owner, name=name) for name in ("old", "unused", "lately"))
    now = timezone.now()
    _rows(used_long_ago.access).update(last_used_at=now - timedelta(days=3))
    _rows(unused.access).update(issued_at=now - timedelta(days=1))
    _rows(used_lately.access).update(last_used_at=now - timedelta(minutes=5))
    names = [entry["name"] for entry in client_for(owner).get("/api/oauth/apps").json()["results"]]
    assert names == ["lately", "unused", "old"]


def test_revoked_and_expired_grants_drop_out_of_the_listing(owner):
    revoked, expired, live = (connect(owner, name=name) for name in ("revoked", "expired", "live"))
    assert client_for(owner).delete(f"/api/oauth/apps/{revoked.client_id}").status_code == 204
    _rows(expired.access).update(refresh_expires_at=timezone.now())
    assert [entry["name"] for entry in client_for(owner).get("/api/oauth/apps").json()["results"]] == ["live"]
    _rows(live.access).update(refresh_expires_at=timezone.now() + timedelta(seconds=30))  # a second inside
    assert [entry["name"] for entry in client_for(owner).get("/api/oauth/apps").json()["results"]] == ["live"]


def test_a_user_sees_only_their_own_apps_and_an_admin_anyone_s_with_the_user_parameter(owner, other_user, admin):
    mine, theirs = connect(owner, name="mine"), connect(other_user, name="theirs")
    assert [entry["name"] for entry in client_for(owner).get("/api/oauth/apps").json()["results"]] == ["mine"]
    assert [entry["name"] for entry in client_for(other_user).get("/api/oauth/apps").json()["results"]] == ["theirs"]
    assert client_for(admin).get("/api/oauth/apps").json()["results"] == []
    listed = client_for(admin).get(f"/api/oauth/apps?user={owner.pk}").json()["results"]
    assert [entry["client_id"] for entry in listed] == [mine.client_id]
    assert client_for(admin).get("/api/oauth/apps?user=999999").json()["results"] == []
    assert theirs.client_id != mine.client_id


@pytest.mark.parametrize("path", ["/api/oauth/apps?user={id}", "/api/oauth/apps/{client}?user={id}"])
def test_a_non_admin_naming_a_user_is_403_even_themselves(owner, other_user, path):
    app = connect(other_user)
    url = path.format(id=other_user.pk, client=app.client_id)
    method = "delete" if "/apps/" in url else "get"
    for asking in (owner, other_user):
        answer = getattr(client_for(asking), method)(url)
        assert answer.status_code == 403 and answer.json()["error"]["code"] == "forbidden", answer.content
    assert refused(app.access) is None


@pytest.mark.parametrize("value", ["abc", "-1", "1.5", "", "1234567890123456789", "١٢"])
def test_an_admin_s_bad_user_parameter_is_400(admin, value):
    answer = client_for(admin).get("/api/oauth/apps", {"user": value})
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid", answer.content
    answer = client_for(admin).delete(f"/api/oauth/apps/x?user={value}")
    assert answer.status_code == 400, answer.content


def test_an_admin_s_largest_user_id_is_read(admin):
    assert client_for(admin).get("/api/oauth/apps", {"user": "9" * 18}).json() == {"results": []}


def test_an_api_key_may_list_the_apps_but_not_disconnect_one(owner):
    app = connect(owner)
    key = _key_client(owner, ["api"])
    listed = key.get("/api/oauth/apps")
    assert listed.status_code == 200 and [entry["client_id"] for entry in listed.json()["results"]] == [app.client_id]
    answer = key.delete(f"/api/oauth/apps/{app.client_id}")
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "forbidden"
    assert refused(app.access) is None


def test_an_admin_s_key_without_the_admin_scope_cannot_read_another_user_s_apps(owner, admin):
    connect(owner)
    answer = _key_client(admin, ["api"]).get(f"/api/oauth/apps?user={owner.pk}")
    assert answer.status_code == 403


def test_disconnecting_an_unknown_app_is_404(owner):
    answer = client_for(owner).delete("/api/oauth/apps/no-such-client")
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"
    registered_never_connected = register()
    assert client_for(owner).delete(f"/api/oauth/apps/{registered_never_connected}").status_code == 404


def test_disconnecting_another_user_s_app_is_404_and_ends_nothing(owner, other_user):
    theirs = connect(other_user)
    answer = client_for(owner).delete(f"/api/oauth/apps/{theirs.client_id}")
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"
    assert refused(theirs.access) is None


def test_disconnecting_ends_only_that_app_for_that_user(owner, other_user):
    app = connect(owner)
    same_app_other_user = connect(other_user, client_id=app.client_id)
    other_app = connect(owner)
    assert client_for(owner).delete(f"/api/oauth/apps/{app.client_id}").status_code == 204
    assert refused(app.access) == "The access token was revoked."
    assert refused(same_app_other_user.access) is None and refused(other_app.access) is None
    assert client_for(owner).delete(f"/api/oauth/apps/{app.client_id}").status_code == 404  # once


def test_disconnecting_is_audited(owner, admin):
    from accounts.models import AuditEvent

    app = connect(owner)
    assert client_for(admin).delete(f"/api/oauth/apps/{app.client_id}?user={owner.pk}").status_code == 204
    event = AuditEvent.objects.get(action="oauth.revoke")
    assert event.actor_name == "root" and event.target == f"oauth_client:{app.client_id}"
    assert event.details == {"user_id": owner.pk, "grants": 1}

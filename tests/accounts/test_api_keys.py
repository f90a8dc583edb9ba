"""API keys (issue 27) in process: /api/keys (the secret once, stored as its SHA-256, others' keys a 404, the
admin scope an admin's own), every way a key dies refused on every in-process door with the same checks on
`Authorization: Bearer` and `x-api-key`, scopes (403 in each path's envelope), the cache dropped at once on a
change and read without a query otherwise, `request.api_key`, and `compat_auth`'s modes and migration.

The doors over real HTTP (/mcp included), the SDKs and the open streams: tests/accounts/test_api_keys_live.py.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.models import Sum
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.authentication import KeyCredential, authenticate_key, credential_of, credential_problem, key_digest
from accounts.models import ApiKey, AuditEvent
from catalogue.models import AgentConfig
from tests.conftest import PASSWORD, client_for
from tests.e2e import poll

pytestmark = pytest.mark.django_db


def _make(user, **fields) -> str:
    answer = client_for(user).post("/api/keys", {"name": "laptop", **fields}, format="json")
    assert answer.status_code == 201, answer.content
    return answer.json()["key"]


def _key_client(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def _set_compat_auth(mode: str) -> None:
    config = AgentConfig.objects.get_or_create(pk=1)[0]
    config.compat_auth = mode
    config.save()


# --- /api/keys ---------------------------------------------------------------------------------------

def test_create_answers_the_secret_once_and_stores_only_its_sha256(owner):
    answer = client_for(owner).post("/api/keys", {"name": "laptop"}, format="json")
    assert answer.status_code == 201
    body = answer.json()
    secret = body["key"]
    assert re.fullmatch(r"ask-[A-Za-z0-9_-]{40,}", secret)
    assert body["prefix"] == secret[:12] and body["name"] == "laptop" and body["scopes"] == ["v1"]
    assert body["revoked"] is False and body["expires_at"] is None and body["last_used_at"] is None
    assert body["status"] == "active" and body["budget"] is None
    row = ApiKey.objects.get(pk=body["id"])
    assert row.hash == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in str([getattr(row, field.attname) for field in ApiKey._meta.fields])
    listed = client_for(owner).get("/api/keys").json()
    assert listed["count"] == 1 and "key" not in listed["results"][0] and "hash" not in listed["results"][0]
    assert secret not in str(listed) and row.hash not in str(listed)
    assert client_for(owner).get(f"/api/keys/{row.pk}").json() == listed["results"][0]


def test_two_keys_never_share_a_secret(owner):
    assert _make(owner) != _make(owner)


@pytest.mark.parametrize(("body", "field"), [
    ({"scopes": ["v2"]}, "scopes"), ({"scopes": []}, "scopes"), ({"scopes": "v1"}, "scopes"),
    ({"name": ""}, "name"), ({"name": "x" * 101}, "name"), ({"expires_at": "tomorrow"}, "expires_at"),
    ({"budget": {"tokens_per_week": 5}}, "budget"), ({"budget": {"tokens_per_day": -1}}, "budget"),
    ({"budget": {"cost_per_day": "5"}}, "budget"), ({"budget": {"requests_per_minute": True}}, "budget"),
    ({"budget": [5]}, "budget"), ({"secret": "mine"}, "secret"),
])
def test_bad_key_bodies_are_400s_naming_the_field(owner, body, field):
    answer = client_for(owner).post("/api/keys", {"name": "laptop", **body}, format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json()["error"]["details"]
    assert not ApiKey.objects.exists()


def test_an_expiry_in_the_past_is_refused(owner):
    answer = client_for(owner).post("/api/keys", {"name": "old", "expires_at": "2020-01-01T00:00:00Z"},
                                    format="json")
    assert answer.status_code == 400 and "expires_at" in answer.json()["error"]["details"]


def test_budget_is_taken_returned_and_changed_by_patch(owner):
    budget = {"tokens_per_day": 50_000, "cost_per_month": 2.5, "requests_per_minute": None}
    answer = client_for(owner).post("/api/keys", {"name": "b", "budget": budget}, format="json")
    assert answer.status_code == 201 and answer.json()["budget"] == budget
    key_id = answer.json()["id"]
    changed = client_for(owner).patch(f"/api/keys/{key_id}", {"budget": {"tokens_per_minute": 10}, "name": "c"},
                                      format="json")
    assert changed.status_code == 200
    assert changed.json()["budget"] == {"tokens_per_minute": 10} and changed.json()["name"] == "c"
    assert ApiKey.objects.get(pk=key_id).budget == {"tokens_per_minute": 10}
    cleared = client_for(owner).patch(f"/api/keys/{key_id}", {"budget": None}, format="json")
    assert cleared.json()["budget"] is None
    refused = client_for(owner).patch(f"/api/keys/{key_id}", {"scopes": ["api"]}, format="json")
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "unknown_field"
    bad = client_for(owner).patch(f"/api/keys/{key_id}", {"budget": {"tokens_per_day": -5}}, format="json")
    assert bad.status_code == 400 and ApiKey.objects.get(pk=key_id).budget is None


def test_another_users_key_is_a_404_for_every_method_and_stays_untouched(owner, other_user):
    secret = _make(owner)
    key = ApiKey.objects.get()
    other = client_for(other_user)
    for answer in (other.get(f"/api/keys/{key.pk}"), other.patch(f"/api/keys/{key.pk}", {"name": "x"}, format="json"),
                   other.delete(f"/api/keys/{key.pk}"), other.get("/api/keys/999999")):
        assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"
    assert other.get("/api/keys").json()["count"] == 0
    key.refresh_from_db()
    assert key.name == "laptop" and not key.revoked
    assert authenticate_key(secret)[0].pk == owner.pk


def test_only_admins_list_others_keys_and_revoke_them(owner, other_user, admin):
    _make(owner)
    _make(other_user)
    for query in ("?all=1", f"?user={other_user.pk}"):
        refused = client_for(owner).get(f"/api/keys{query}")
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    everyone = client_for(admin).get("/api/keys?all=1").json()
    assert sorted(row["user"]["username"] for row in everyone["results"]) == ["other", "owner"]
    others = client_for(admin).get(f"/api/keys?user={other_user.pk}").json()["results"]
    assert [row["user"]["username"] for row in others] == ["other"]
    assert client_for(admin).get("/api/keys").json()["count"] == 0  # without a query: the admin's own
    assert client_for(admin).delete(f"/api/keys/{others[0]['id']}").status_code == 204
    assert ApiKey.objects.get(pk=others[0]["id"]).revoked


def test_the_admin_scope_is_an_admins_own_and_only_it_opens_admin_operations(owner, admin):
    refused = client_for(owner).post("/api/keys", {"name": "x", "scopes": ["api", "admin"]}, format="json")
    assert refused.status_code == 403 and not ApiKey.objects.exists()
    plain = _key_client(_make(admin, scopes=["api"]))
    assert plain.get("/api/auth/me").json()["is_admin"] is False
    denied = plain.patch("/api/config", {"compat_auth": "key"}, format="json")
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "forbidden"
    assert plain.get("/api/keys?all=1").status_code == 403
    # A key without the admin scope cannot make itself one that has it.
    assert plain.post("/api/keys", {"name": "y", "scopes": ["admin"]}, format="json").status_code == 403
    full = _key_client(_make(admin, scopes=["api", "admin"]))
    assert full.patch("/api/config", {"compat_auth": "key"}, format="json").status_code == 200
    assert AgentConfig.objects.get().compat_auth == "key"


def test_revoking_is_idempotent_and_the_record_stays(owner):
    _make(owner)
    key = ApiKey.objects.get()
    client = client_for(owner)
    assert client.delete(f"/api/keys/{key.pk}").status_code == 204
    first = ApiKey.objects.get().revoked_at
    assert client.delete(f"/api/keys/{key.pk}").status_code == 204
    row = client.get(f"/api/keys/{key.pk}").json()
    assert row["revoked"] is True and row["status"] == "revoked" and ApiKey.objects.get().revoked_at == first


# --- every way a key dies, on every in-process door ------------------------------------------------------

def _revoke(user, key):
    client_for(user).delete(f"/api/keys/{key.pk}")


def _expire(user, key):
    ApiKey.objects.filter(pk=key.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    key.refresh_from_db()
    key.save()  # announced as an expiry set through the API would be


def _deactivate(user, key):
    user.is_active = False
    user.save()


def _change_password(user, key):
    client_for(user).post("/api/auth/change-password", {"old_password": PASSWORD, "new_password": "n3w-Pass-word!"},
                          format="json")


def _delete_user(user, key):
    user.delete()


DEATHS = {"revoked": _revoke, "expired": _expire, "deactivated": _deactivate, "password_changed": _change_password,
          "user_deleted": _delete_user}


def _v1(secret: str, header: str, path: str = "/v1/models"):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {secret}"} if header == "bearer" else {"HTTP_X_API_KEY": secret}
    if path == "/v1/models":
        return Client().get(path, **headers)
    return Client().post(path, {"model": "agent", "messages": [{"role": "user", "content": "hi"}]},
                         content_type="application/json", **headers)


@pytest.mark.parametrize("death", sorted(DEATHS))
def test_a_dead_key_is_refused_at_once_on_every_door_and_header(owner, death):
    secret = _make(owner, scopes=["v1", "api", "mcp"])
    key = ApiKey.objects.get()
    assert _key_client(secret).get("/api/auth/me").status_code == 200  # cached now, in every cache
    for header in ("bearer", "x-api-key"):
        assert _v1(secret, header).status_code == 200
    assert async_to_sync(credential_problem)(credential_of(f"Bearer {secret}")) is None
    DEATHS[death](owner, key)
    refused = _key_client(secret).get("/api/auth/me")
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "token_invalid"
    assert refused["WWW-Authenticate"].startswith("Bearer")
    for header in ("bearer", "x-api-key"):
        for path in ("/v1/models", "/v1/chat/completions"):
            answer = _v1(secret, header, path)
            assert answer.status_code == 401, (header, path, answer.content)
            assert answer.json()["error"]["type"] == "authentication_error"
            assert answer.json()["error"]["code"] == "invalid_api_key"
    # The async /api doors (the chat and workflow streams) and what open streams ask before each event.
    chat = Client().post(f"/api/sessions/{uuid.uuid4()}/chat", {"message": "hi"}, content_type="application/json",
                         HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert chat.status_code == 401 and chat.json()["error"]["code"] == "token_invalid"
    problem = async_to_sync(credential_problem)(credential_of(f"Bearer {secret}"))
    assert problem is not None and problem.code == "token_invalid" and problem.status == 401


def test_an_unknown_or_malformed_key_is_refused_on_each_header_even_where_anonymous_callers_are_served(owner):
    _set_compat_auth("public")
    for secret in ("ask-" + "A" * 43, "ask-", "ask-\u00e9t\u00e9"):
        for header in ("bearer", "x-api-key"):
            answer = _v1(secret, header)
            assert answer.status_code == 401 and answer.json()["error"]["code"] == "invalid_api_key", secret
    assert _key_client("ask-" + "A" * 43).get("/api/auth/me").status_code == 401


# Committed (transaction=True): an async door writes its audit row on a thread of its own, which a test's open
# transaction would hold at SQLite's busy timeout (10 s a request) and PostgreSQL's foreign-key check.
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("scopes", "door"), [(["api"], "v1"), (["mcp"], "v1"), (["v1"], "api"), (["mcp"], "api")])
def test_a_key_out_of_its_scopes_is_a_403_in_the_paths_envelope(owner, scopes, door):
    secret = _make(owner, scopes=scopes)
    if door == "v1":
        for header in ("bearer", "x-api-key"):
            for path in ("/v1/models", "/v1/chat/completions"):
                answer = _v1(secret, header, path)
                assert answer.status_code == 403, (header, path)
                assert answer.json()["error"]["type"] == "permission_error"
                assert answer.json()["error"]["code"] == "key_scope"
        refusals = 4
    else:
        for answer in (_key_client(secret).get("/api/auth/me"), _key_client(secret).get("/api/keys"),
                       Client().post(f"/api/sessions/{uuid.uuid4()}/chat", {"message": "hi"},
                                     content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {secret}")):
            assert answer.status_code == 403
            assert answer.json()["error"]["code"] == "key_scope" and "'api'" in answer.json()["error"]["message"]
        refusals = 3
    # Each refusal is audited, the async doors' too (their rows are written off the event loop), counted in
    # the minute's row (coalesced: tests/accounts/test_audit_coalescing.py).
    poll(lambda: AuditEvent.objects.filter(action="key.scope_refused").aggregate(total=Sum("count"))["total"]
         == refusals, f"{refusals} key.scope_refused audit events counted", timeout=10)


def test_x_api_key_carries_only_keys_never_a_dashboard_token(owner):
    _set_compat_auth("key")
    token = client_for(owner)._credentials["HTTP_AUTHORIZATION"].split()[1]
    assert Client().get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 200
    assert Client().get("/v1/models", HTTP_X_API_KEY=token).status_code == 401


# --- the cache ---------------------------------------------------------------------------------------

def test_a_cached_key_costs_no_query_and_a_change_drops_it_at_once(owner, django_assert_num_queries):
    secret = _make(owner)
    credential = KeyCredential(key_digest(secret))
    assert authenticate_key(secret)[0].pk == owner.pk
    with django_assert_num_queries(0):
        for _ in range(3):
            assert authenticate_key(secret)[1].hash == key_digest(secret)
            assert async_to_sync(credential_problem)(credential) is None
    client_for(owner).patch(f"/api/keys/{ApiKey.objects.get().pk}", {"name": "renamed"}, format="json")
    assert authenticate_key(secret)[1].name == "renamed"  # not the cached row of before


def test_the_user_a_key_hands_out_is_a_copy(admin):
    secret = _make(admin, scopes=["api"])
    user, key = authenticate_key(secret)
    user.username, key.name = "changed", "changed"
    again_user, again_key = authenticate_key(secret)
    assert again_user.username == "root" and again_key.name == "laptop"
    assert again_user.is_staff is False  # stripped: the key has no admin scope
    assert authenticate_key(_make(admin, scopes=["api", "admin"]))[0].is_staff is True


def test_request_api_key_names_the_key_on_each_door_and_is_none_otherwise(owner, rf):
    from accounts.authentication import JWTAuthentication

    secret = _make(owner, scopes=["api"])
    from rest_framework.request import Request

    with_key = Request(rf.get("/api/auth/me", HTTP_AUTHORIZATION=f"Bearer {secret}"))
    user, key = JWTAuthentication().authenticate(with_key)
    assert with_key.api_key.pk == key.pk == ApiKey.objects.get().pk and user.pk == owner.pk
    with_token = Request(rf.get("/api/auth/me", HTTP_AUTHORIZATION=client_for(owner)._credentials[
        "HTTP_AUTHORIZATION"]))
    assert JWTAuthentication().authenticate(with_token)[0].pk == owner.pk and with_token.api_key is None


# --- compat_auth ---------------------------------------------------------------------------------------

def test_local_serves_anonymous_callers_from_loopback_only(owner, settings):
    _set_compat_auth("local")
    assert Client().get("/v1/models").status_code == 200  # the test client is 127.0.0.1
    assert Client(REMOTE_ADDR="::1").get("/v1/models").status_code == 200
    for client in (Client(REMOTE_ADDR="10.1.2.3"), Client(REMOTE_ADDR="::ffff:10.1.2.3")):
        refused = client.post("/v1/chat/completions", {"model": "agent", "messages": []},
                              content_type="application/json", HTTP_AUTHORIZATION="Bearer sk-placeholder")
        assert refused.status_code == 401 and "compat_auth" in refused.json()["error"]["message"]
        assert refused.json()["error"]["code"] == "invalid_api_key"
        assert client.get("/v1/models").status_code == 401
    # From elsewhere, a key (either header) or a token is served.
    secret = _make(owner)
    assert Client(REMOTE_ADDR="10.1.2.3").get("/v1/models", HTTP_X_API_KEY=secret).status_code == 200
    assert Client(REMOTE_ADDR="10.1.2.3").get("/v1/models", HTTP_AUTHORIZATION=client_for(owner)._credentials[
        "HTTP_AUTHORIZATION"]).status_code == 200
    # Behind a trusted proxy the client is the address the proxy saw, as the rate limits see it.
    settings.TRUSTED_PROXY_COUNT = 1
    assert Client(REMOTE_ADDR="127.0.0.1").get("/v1/models", HTTP_X_FORWARDED_FOR="10.1.2.3").status_code == 401
    assert Client(REMOTE_ADDR="10.9.9.9").get("/v1/models", HTTP_X_FORWARDED_FOR="127.0.0.1").status_code == 200
    settings.TRUSTED_PROXY_COUNT = 0
    assert Client(REMOTE_ADDR="10.9.9.9").get("/v1/models", HTTP_X_FORWARDED_FOR="127.0.0.1").status_code == 401


@pytest.mark.parametrize("mode", ["key", "token"])
def test_key_mode_refuses_anonymous_callers_even_from_loopback(owner, mode):
    _set_compat_auth(mode)
    refused = Client().get("/v1/models", HTTP_AUTHORIZATION="Bearer sk-placeholder")
    assert refused.status_code == 401 and f"compat_auth is '{mode}'" in refused.json()["error"]["message"]
    assert Client().get("/v1/models", HTTP_X_API_KEY=_make(owner)).status_code == 200


def test_public_serves_anyone(owner):
    _set_compat_auth("public")
    assert Client(REMOTE_ADDR="10.1.2.3").get("/v1/models").status_code == 200


def test_the_default_is_local():
    assert AgentConfig().compat_auth == "local"
    assert AgentConfig.objects.get_or_create(pk=1)[0].compat_auth == "local"


BEFORE_LOCAL = [("accounts", "0003_apikey")]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("before", "after"), [("public", "local"), ("token", "token")])
def test_the_migration_moves_public_to_local_and_keeps_token(before, after):
    AgentConfig.objects.get_or_create(pk=1)  # the row, made with today's columns
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE_LOCAL)
    old = executor.loader.project_state(BEFORE_LOCAL).apps.get_model("accounts", "AgentConfig")
    # An UPDATE of the one column: the connections' migrations (issue 26, another branch of the graph) stay
    # applied, so the old state's other columns are not all in the table.
    old.objects.filter(pk=1).update(compat_auth=before)
    executor = MigrationExecutor(connection)
    # Every app's leaf: the migrations of other apps that build on a later accounts state (the API key that
    # made a trigger or a task) were unapplied with it.
    executor.migrate(executor.loader.graph.leaf_nodes())
    assert AgentConfig.objects.get(pk=1).compat_auth == after

"""The audit log (issue 28, item 3): each audited action appears once with the right actor, outcome, address and
door; GET /api/audit is admins' with filters and pagination; rows are append-only; retention trims; and
distinctive secrets set through the audited actions appear in no log line, audit row or metric."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.audit import audit_trim
from accounts.models import AuditEvent
from agentsite.core import metrics

pytestmark = pytest.mark.django_db

PASSWORD = "Pw-zebra-91c4e7-Secret"
NEW_PASSWORD = "Pw-new-koala-5b2d88-Secret"
CONNECTION_KEY = "sk-conn-f00dfeed1234-secret"
HEADER_VALUE = "hdr-value-7a7a7a-secret"


def events(action: str, **filters) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action, **filters).order_by("id"))


def login(client: APIClient, username: str, password: str, **extra):
    return client.post("/api/auth/login", {"username": username, "password": password}, format="json", **extra)


def test_logins_logouts_refresh_reuse_password_changes_and_registration(django_user_model, settings):
    settings.TRUSTED_PROXY_COUNT = 1
    settings.LOGIN_RATE_LIMIT = 3
    user = django_user_model.objects.create_user("alice", password=PASSWORD)
    client = APIClient(HTTP_USER_AGENT="audit-test-agent/1.0", HTTP_X_FORWARDED_FOR="203.0.113.7")

    assert login(client, "alice", "wrong-password").status_code == 401
    ok = login(client, "alice", PASSWORD)
    assert ok.status_code == 200
    assert login(client, "alice", "again-wrong").status_code == 401
    assert login(client, "alice", PASSWORD).status_code == 429  # the fourth attempt in the window

    logins = events("auth.login")
    assert [(e.outcome, e.actor_name) for e in logins] == [
        ("failure", "alice"), ("success", "alice"), ("failure", "alice"), ("refused", "alice")]
    success = logins[1]
    assert success.actor_id == user.pk and success.door == "jwt"
    assert success.ip == "203.0.113.7" and success.user_agent == "audit-test-agent/1.0"
    assert logins[3].details == {"reason": "rate_limited"}

    tokens = ok.json()
    authed = APIClient(HTTP_AUTHORIZATION=f"Bearer {tokens['token']}")
    refreshed = authed.post("/api/auth/refresh", {"refresh": tokens["refresh"]}, format="json")
    assert refreshed.status_code == 200
    assert not events("auth.refresh_reuse")
    assert authed.post("/api/auth/refresh", {"refresh": tokens["refresh"]}, format="json").status_code == 401
    reuse = events("auth.refresh_reuse")
    assert len(reuse) == 1 and reuse[0].actor_id == user.pk and reuse[0].outcome == "refused"

    changed = authed.post("/api/auth/change-password", {"old_password": "not-it", "new_password": NEW_PASSWORD},
                          format="json")
    assert changed.status_code == 400
    changed = authed.post("/api/auth/change-password", {"old_password": PASSWORD, "new_password": NEW_PASSWORD},
                          format="json")
    assert changed.status_code == 200
    assert [(e.outcome, e.actor_id) for e in events("auth.password_change")] == [
        ("failure", user.pk), ("success", user.pk)]

    pair = changed.json()
    again = APIClient(HTTP_AUTHORIZATION=f"Bearer {pair['token']}")
    assert again.post("/api/auth/logout", {"refresh": pair["refresh"]}, format="json").status_code == 204
    logout = events("auth.logout")
    assert len(logout) == 1 and logout[0].actor_id == user.pk and logout[0].door == "jwt"


def test_registration_and_activation_and_config_changes(admin_client, admin, django_user_model):
    from catalogue.services import config_update

    config_update(changes={"allow_registration": True})
    anon = APIClient()
    made = anon.post("/api/auth/register", {"username": "bob", "password": PASSWORD}, format="json")
    assert made.status_code == 201
    taken = anon.post("/api/auth/register", {"username": "bob", "password": PASSWORD}, format="json")
    assert taken.status_code >= 400
    assert [(e.outcome, e.actor_name) for e in events("auth.register")] == [("success", "bob"), ("failure", "bob")]

    bob = django_user_model.objects.get(username="bob")
    bob.is_active = False
    bob.save()
    activation = events("user.activation")
    assert len(activation) == 1 and activation[0].target == f"user:{bob.pk}"
    assert activation[0].details["is_active"] is False

    response = admin_client.patch("/api/config", {"system_prompt": "Be brief.", "temperature": 0.3}, format="json")
    assert response.status_code == 200
    change = events("config.change")
    assert len(change) == 1 and change[0].actor_id == admin.pk
    assert change[0].details == {"fields": ["system_prompt", "temperature"]}


def test_django_admin_log_ins_are_audited_through_the_session_door(admin, settings):
    admin.set_password(PASSWORD)
    admin.save()
    browser = Client(HTTP_USER_AGENT="a-browser")
    page = browser.get("/admin/login/")
    assert page.status_code == 200
    browser.post("/admin/login/?next=/admin/", {"username": admin.username, "password": "wrong"})
    browser.post("/admin/login/?next=/admin/", {"username": admin.username, "password": PASSWORD})
    rows = events("admin.login")
    assert [(e.outcome, e.door, e.actor_name) for e in rows] == [
        ("failure", "session", admin.username), ("success", "session", admin.username)]
    assert rows[1].actor_id == admin.pk and rows[1].user_agent == "a-browser"
    assert not events("auth.login")  # the admin form's log-in is not counted twice


def test_connection_changes_name_fields_never_secret_values(admin_client, admin):
    made = admin_client.post("/api/connections", {
        "name": "hosted-x", "provider": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key": CONNECTION_KEY,
        "headers": {"X-Custom": HEADER_VALUE}, "models": ["m1"]}, format="json")
    assert made.status_code == 201, made.content
    connection_id = made.json()["id"]
    assert admin_client.patch(f"/api/connections/{connection_id}", {"api_key": CONNECTION_KEY + "-2"},
                              format="json").status_code == 200
    assert admin_client.delete(f"/api/connections/{connection_id}").status_code == 204
    rows = [(e.action, e.actor_id, e.target) for e in AuditEvent.objects.filter(action__startswith="connection.")
            .order_by("id")]
    assert rows == [("connection.create", admin.pk, "connection:hosted-x"),
                    ("connection.update", admin.pk, "connection:hosted-x"),
                    ("connection.delete", admin.pk, "connection:hosted-x")]
    update = events("connection.update")[0]
    assert update.details == {"fields": ["api_key"]}


def test_the_audit_api_is_for_admins_with_filters_and_pagination(admin_client, owner_client, anon_client, owner):
    login(APIClient(), owner.username, "wrong")
    for _ in range(3):
        login(APIClient(), "nobody", "wrong")
    assert anon_client.get("/api/audit").status_code == 401
    assert owner_client.get("/api/audit").status_code == 403
    page = admin_client.get("/api/audit?limit=2")
    assert page.status_code == 200
    body = page.json()
    assert body["count"] == 4 and len(body["results"]) == 2 and body["next"]
    first = body["results"][0]
    assert set(first) == {"id", "time", "action", "outcome", "actor", "actor_id", "ip", "user_agent", "door",
                          "target", "details", "count"}
    assert admin_client.get("/api/audit?actor=nobody").json()["count"] == 3
    assert admin_client.get(f"/api/audit?actor={owner.username}").json()["count"] == 1
    assert admin_client.get("/api/audit?action=auth.").json()["count"] == 4
    assert admin_client.get("/api/audit?action=auth.logout").json()["count"] == 0
    assert admin_client.get("/api/audit?outcome=failure").json()["count"] == 4
    assert admin_client.get("/api/audit?outcome=success").json()["count"] == 0
    future = (timezone.now() + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    assert admin_client.get(f"/api/audit?from={future}").json()["count"] == 0
    assert admin_client.get(f"/api/audit?to={future}").json()["count"] == 4
    bad = admin_client.get("/api/audit?from=yesterday")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid"
    assert admin_client.get("/api/audit?outcome=maybe").status_code == 400


def test_rows_are_append_only_and_retention_trims_the_old(settings):
    login(APIClient(), "someone", "wrong")
    row = AuditEvent.objects.get()
    row.outcome = "success"
    with pytest.raises(ValueError):
        row.save()
    settings.AGENTSITE_AUDIT_RETENTION_DAYS = 30
    AuditEvent.objects.filter(pk=row.pk).update(time=timezone.now() - timedelta(days=31))
    login(APIClient(), "someone", "wrong")
    assert audit_trim() == 1
    assert AuditEvent.objects.count() == 1


def test_no_secret_appears_in_any_log_line_audit_row_or_metric(admin_client, django_user_model, caplog,
                                                               monkeypatch, settings):
    monkeypatch.setattr(metrics, "ENABLED", True)
    monkeypatch.delenv(metrics.MULTIPROC_ENV, raising=False)
    settings.AGENTSITE_METRICS_TOKEN = ""
    caplog.set_level(logging.DEBUG)
    django_user_model.objects.create_user("carol", password=PASSWORD)
    client = APIClient()
    login(client, "carol", "Wrong-" + PASSWORD)
    tokens = login(client, "carol", PASSWORD).json()
    authed = APIClient(HTTP_AUTHORIZATION=f"Bearer {tokens['token']}")
    authed.post("/api/auth/change-password", {"old_password": PASSWORD, "new_password": NEW_PASSWORD},
                format="json")
    made = admin_client.post("/api/connections", {
        "name": "secret-conn", "provider": "openai", "base_url": "http://127.0.0.1:9/v1",
        "api_key": CONNECTION_KEY, "headers": {"Authorization": HEADER_VALUE}, "models": ["m"]}, format="json")
    assert made.status_code == 201
    admin_client.patch("/api/config", {"api_key": CONNECTION_KEY}, format="json")
    admin_client.post("/api/auth/refresh", {"refresh": tokens["refresh"]}, format="json")
    scrape = admin_client.get("/metrics").content.decode()

    rows = json.dumps(list(AuditEvent.objects.values()), default=str)
    logs = "\n".join(record.getMessage() + json.dumps(getattr(record, "audit", {}), default=str)
                     for record in caplog.records)
    assert AuditEvent.objects.count() >= 5 and "agentsite.audit" in {r.name for r in caplog.records}
    for secret in (PASSWORD, NEW_PASSWORD, CONNECTION_KEY, HEADER_VALUE, tokens["refresh"], tokens["token"]):
        for where, text in (("audit rows", rows), ("log lines", logs), ("metrics", scrape)):
            assert secret not in text, f"a secret appeared in the {where}"

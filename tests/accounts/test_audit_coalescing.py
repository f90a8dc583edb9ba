"""Refusals a client can repeat at will (a key outside its scopes, a failed registration, a failed password
change) cannot flood the audit log: like events of one minute are one row with a `count`."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

import pytest
from django.db import close_old_connections, connection
from rest_framework.test import APIClient

from accounts.audit import audit_store
from accounts.models import AuditEvent
from agentsite.core.audit import bucket_of
from tests.conftest import PASSWORD, client_for

BURST = 300


def _rows(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("id"))


def _assert_coalesced(rows: list[AuditEvent], total: int, *, per: Callable[[AuditEvent], object]) -> None:
    """At most one row per (key, minute): the burst may cross one minute's end, so at most two per key."""
    assert sum(row.count for row in rows) == total, [(row.details, row.count) for row in rows]
    by_key = Counter(per(row) for row in rows)
    assert all(number <= 2 for number in by_key.values()), by_key
    assert len({row.bucket for row in rows}) == len(rows)


@pytest.mark.django_db
def test_a_burst_of_scope_refusals_writes_one_row_a_minute_with_the_count(owner):
    secret = client_for(owner).post("/api/keys", {"name": "v1 only", "scopes": ["v1"]}, format="json").json()["key"]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    for _ in range(BURST):
        assert client.get("/api/auth/me").status_code == 403
    rows = _rows("key.scope_refused")
    assert 1 <= len(rows) <= 2
    _assert_coalesced(rows, BURST, per=lambda row: (row.target, row.ip))
    assert rows[0].details["scope"] == "api" and rows[0].outcome == "refused"


@pytest.mark.django_db
def test_a_burst_of_failed_registrations_writes_one_row_per_address_code_and_minute(owner):
    anon = APIClient()
    for number in range(BURST):
        address = "10.0.0.1" if number % 3 else "10.0.0.2"
        answer = anon.post("/api/auth/register", {"username": "owner", "password": PASSWORD}, format="json",
                           REMOTE_ADDR=address)  # a taken name
        assert answer.status_code == 400
    rows = _rows("auth.register")
    assert 2 <= len(rows) <= 4
    _assert_coalesced(rows, BURST, per=lambda row: (row.ip, row.details["code"]))
    assert {row.ip: 0 for row in rows}.keys() == {"10.0.0.1", "10.0.0.2"}


@pytest.mark.django_db
def test_a_burst_of_failed_password_changes_writes_one_row_per_user_code_and_minute(owner, other_user):
    for number in range(BURST):
        user = owner if number % 2 else other_user
        client_for(user).post("/api/auth/change-password", {"old_password": "wrong", "new_password": "n3w-Pass-word!"},
                              format="json")
    rows = _rows("auth.password_change")
    _assert_coalesced(rows, BURST, per=lambda row: (row.actor_id, row.outcome, row.details["code"]))
    codes = Counter()
    for row in rows:
        codes[(row.actor_id, row.details["code"])] += row.count
    # 10 wrong passwords a minute per user and per address get through to the check (400), then 429s (10 more
    # in a second window, on a machine slow enough for the burst to outlast the first).
    invalid = sum(count for (_, code), count in codes.items() if code == "invalid")
    assert invalid in (10, 20)
    assert sum(count for (_, code), count in codes.items() if code == "rate_limited") == BURST - invalid
    assert len(rows) <= 2 * 4


@pytest.mark.django_db
def test_the_audit_api_shows_the_count(owner, admin):
    for _ in range(3):
        APIClient().post("/api/auth/register", {"username": "owner", "password": PASSWORD}, format="json")
    listed = client_for(admin).get("/api/audit?action=auth.register").json()["results"]
    # One row, or two when a minute ended among the three (newest first: 1 then 2, or 2 then 1).
    assert {row["outcome"] for row in listed} == {"failure"} and len(listed) <= 2, listed
    assert sum(row["count"] for row in listed) == 3, listed


@pytest.mark.django_db(transaction=True)
def test_processes_racing_for_a_buckets_first_row_insert_one_and_lose_no_count():
    event = {"action": "auth.register", "outcome": "failure", "actor_id": None, "actor": "x", "ip": "10.1.1.1",
             "user_agent": "", "door": "anonymous", "target": "", "details": {"code": "invalid"}}
    event["bucket"] = bucket_of(event, "invalid", minute=1)
    start = threading.Barrier(8)
    failures: list[BaseException] = []

    def store() -> None:
        try:
            start.wait(timeout=5)
            for _ in range(5):
                audit_store(dict(event))
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=store) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not failures, failures
    rows = list(AuditEvent.objects.filter(bucket=event["bucket"]))
    assert len(rows) == 1 and rows[0].count == 40

"""Refused webhook requests in the audit log (issue 31 item 1, issue 28 item 3): each kind of refusal appears once
in GET /api/audit as `webhook.refused`, with its outcome, the trigger as target, the status and code, and the
client address as the trusted-proxy rule sees it; never the secret or the body; and the flood rule holds (one
event per trigger, code and minute; unknown triggers share one bucket)."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from rest_framework.test import APIClient

from accounts.models import AuditEvent
from tests.workflows.test_webhooks import DOUBLE, make_trigger, send

pytestmark = pytest.mark.django_db

CLIENT_IP = "203.0.113.9"
FORWARDED = {"HTTP_X_FORWARDED_FOR": f"{CLIENT_IP}, 10.0.0.2", "HTTP_USER_AGENT": "hook-sender/2"}
WRONG_SECRET = "whsec_" + "7e57" * 16
BODY_MARK = "body-mark-5f3c1a"


@pytest.fixture(autouse=True)
def _setup(settings, audit_minute):
    settings.TRUSTED_PROXY_COUNT = 2
    AuditEvent.objects.filter(action="webhook.refused").delete()


@pytest.fixture
def workflow_id(owner_client) -> str:
    response = owner_client.post("/api/workflows", {"name": "double", **DOUBLE}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def audited(admin_client) -> list[dict]:
    page = admin_client.get("/api/audit?action=webhook.refused&limit=200")
    assert page.status_code == 200, page.content
    return list(reversed(page.json()["results"]))  # oldest first


def post(path: str, body: bytes = b"{}", content_type: str = "application/json", **extra):
    return APIClient().generic("POST", path, body, content_type=content_type, **FORWARDED, **extra)


def test_each_refusal_kind_is_recorded_once_with_its_outcome_and_target(owner, owner_client, admin_client,
                                                                       workflow_id):
    from usage import budgets
    from usage.services import budget_set

    trigger = make_trigger(owner_client, workflow_id)
    limited = make_trigger(owner_client, workflow_id, rate_per_minute=1)
    unknown = str(uuid.uuid4())
    target, limited_target = f"trigger:{trigger['id']}", f"trigger:{limited['id']}"
    stamp = int(time.time())
    expected = []

    def expect(response, status, code, outcome, where=target):
        assert response.status_code == status and response.json()["error"]["code"] == code, response.content[:300]
        expected.append((code, status, outcome, where))

    expect(post(f"/hooks/{unknown}"), 404, "not_found", "refused", f"trigger:{unknown}")
    expect(APIClient().get(f"/hooks/{trigger['id']}", **FORWARDED), 405, "method_not_allowed", "refused")
    expect(send(trigger, b'{"n": "' + b"x" * (10 * 1024 * 1024) + b'"}', headers=FORWARDED), 413,
           "payload_too_large", "refused")
    expect(send(trigger, secret=WRONG_SECRET, headers=FORWARDED), 401, "signature_invalid", "failure")
    expect(send(trigger, signed=True, stamp=stamp - 400, headers=FORWARDED), 401, "signature_expired", "failure")
    assert send(trigger, signed=True, stamp=stamp, headers=FORWARDED).status_code == 200
    expect(send(trigger, signed=True, stamp=stamp, headers=FORWARDED), 409, "signature_replayed", "failure")
    expect(send(trigger, f"n={BODY_MARK}", "application/x-www-form-urlencoded", headers=FORWARDED), 415,
           "unsupported_media_type", "refused")
    expect(send(trigger, "{not json " + BODY_MARK, headers=FORWARDED), 400, "invalid", "refused")
    path = f"/api/workflows/{workflow_id}/triggers/{trigger['id']}"
    owner_client.patch(path, {"enabled": False}, format="json")
    expect(send(trigger, headers=FORWARDED), 403, "trigger_disabled", "refused")
    owner_client.patch(path, {"enabled": True}, format="json")
    assert send(limited, headers=FORWARDED).status_code == 200
    expect(send(limited, headers=FORWARDED), 429, "rate_limited", "refused", limited_target)
    budget_set(user_id=owner.pk, budget={"tokens_per_day": 10})
    scopes = [budgets.Scope(f"u:{owner.pk}", {"tokens_per_day": 10})]
    budgets.reserve(scopes)
    budgets.settle(scopes, 11, 0.0)
    expect(send(trigger, headers=FORWARDED), 429, "budget_exceeded", "refused")

    events = audited(admin_client)
    assert [(e["details"]["code"], e["details"]["status"], e["outcome"], e["target"]) for e in events] == expected
    for event in events:
        assert set(event["details"]) == {"status", "code"}
        assert (event["door"], event["actor_id"], event["actor"]) == ("anonymous", None, "")
        assert (event["ip"], event["user_agent"]) == (CLIENT_IP, "hook-sender/2")
    text = json.dumps(events) + json.dumps(list(AuditEvent.objects.values()), default=str)
    for secret in (trigger["secret"], limited["secret"], WRONG_SECRET, BODY_MARK):
        assert secret not in text
    failures = admin_client.get("/api/audit?action=webhook.refused&outcome=failure").json()["count"]
    assert failures == 3


def test_the_flood_rule_one_event_per_trigger_code_and_minute(owner_client, admin_client, workflow_id,
                                                              audit_minute):
    trigger = make_trigger(owner_client, workflow_id, rate_per_minute=2)
    other = make_trigger(owner_client, workflow_id)
    for _ in range(20):
        assert send(trigger, secret=WRONG_SECRET, headers=FORWARDED).status_code == 401
        assert post(f"/hooks/{uuid.uuid4()}").status_code == 404  # random ids share one bucket
        assert post(f"/hooks/{uuid.uuid4()}", CONTENT_LENGTH="99999999").status_code == 413
    assert send(other, secret=WRONG_SECRET, headers=FORWARDED).status_code == 401  # another trigger: its own
    answers = [send(trigger, headers=FORWARDED).status_code for _ in range(12)]
    assert answers.count(429) >= 8  # (a real minute may turn in between)
    rows = [(e["target"].startswith(f"trigger:{trigger['id']}"), e["details"]["code"]) for e in audited(admin_client)]
    assert sorted(rows) == sorted([(True, "signature_invalid"), (False, "not_found"), (False, "payload_too_large"),
                                   (False, "signature_invalid"), (True, "rate_limited")])

    audit_minute.advance()  # the next minute records each kind again, once
    for _ in range(5):
        send(trigger, secret=WRONG_SECRET, headers=FORWARDED)
        post(f"/hooks/{uuid.uuid4()}")
    codes = [e["details"]["code"] for e in audited(admin_client)]
    assert (codes.count("signature_invalid"), codes.count("not_found"), len(codes)) == (3, 2, 7)

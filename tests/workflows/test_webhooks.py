"""Webhook triggers (issue 31 items 1 and 4): managing them, and every way POST /hooks/<id> admits or refuses."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from types import SimpleNamespace

import pytest
from rest_framework.test import APIClient

from accounts.models import AuditEvent
from tests.workflows.conftest import graph, node
from workflows.models import WorkflowRun
from workflows.runs import MAX_INPUT_CHARS
from workflows.tasks import workflow_run_task

pytestmark = pytest.mark.django_db

DOUBLE = graph(node("in", "input"), node("calc", "code", code="return JSON.parse(input).n * 2;"),
               node("out", "output"), edges=[("in", "calc"), ("calc", "out")])


@pytest.fixture
def workflow_id(owner_client) -> str:
    response = owner_client.post("/api/workflows", {"name": "double", **DOUBLE}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def make_trigger(owner_client, workflow_id: str, **body) -> dict:
    response = owner_client.post(f"/api/workflows/{workflow_id}/triggers", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def send(trigger: dict, body: bytes | str = b'{"n": 21}', content_type: str = "application/json", *,
         secret: str | None = None, signed: bool = False, stamp: int | None = None, headers: dict | None = None):
    raw = body.encode() if isinstance(body, str) else body
    extra = dict(headers or {})
    secret = secret or trigger["secret"]
    if signed:
        ts = str(int(time.time()) if stamp is None else stamp)
        mac = hmac.new(secret.encode(), ts.encode() + b"." + raw, hashlib.sha256).hexdigest()
        extra.update({"HTTP_X_AGENTSITE_TIMESTAMP": ts, "HTTP_X_AGENTSITE_SIGNATURE": f"sha256={mac}"})
    elif "HTTP_AUTHORIZATION" not in extra:
        extra["HTTP_AUTHORIZATION"] = f"Bearer {secret}"
    return APIClient().generic("POST", f"/hooks/{trigger['id']}", raw, content_type=content_type, **extra)


def refused(response, status: int, code: str) -> None:
    assert response.status_code == status, response.content[:500]
    assert response.json()["error"]["code"] == code


def test_create_shows_the_secret_once(owner_client, workflow_id):
    trigger = make_trigger(owner_client, workflow_id)
    assert trigger["secret"].startswith("whsec_") and trigger["url"].endswith(f"/hooks/{trigger['id']}")
    assert (trigger["kind"], trigger["mode"], trigger["enabled"], trigger["version"]) == ("webhook", "sync", True, None)
    listed = owner_client.get(f"/api/workflows/{workflow_id}/triggers").json()
    assert [item["id"] for item in listed] == [trigger["id"]]
    assert "secret" not in listed[0] and listed[0]["secret_set"] is True
    assert trigger["secret"] not in json.dumps(listed)


def test_bearer_starts_a_sync_run_and_answers_it(owner_client, workflow_id):
    trigger = make_trigger(owner_client, workflow_id)
    response = send(trigger)
    assert response.status_code == 200, response.content
    run = response.json()
    assert (run["status"], run["output"], run["version"], run["input_chars"]) == ("success", "42", 1, 9)
    assert "input" not in run and "outputs" not in run  # the body is not echoed (the input node's output is it)
    refused(send(trigger, secret="whsec_" + "0" * 64), 401, "signature_invalid")
    refused(send(trigger, headers={"HTTP_AUTHORIZATION": "Basic abc"}), 401, "signature_invalid")
    refused(APIClient().post(f"/hooks/{trigger['id']}", {"n": 1}, format="json"), 401, "signature_invalid")


def test_hmac_signature_and_text_bodies(owner_client, workflow_id):
    trigger = make_trigger(owner_client, workflow_id)
    response = send(trigger, signed=True)
    assert response.status_code == 200 and response.json()["output"] == "42", response.content
    echo = owner_client.post("/api/workflows", {"name": "echo", **graph(node("in", "input"), node("out", "output"),
                                                                         edges=[("in", "out")])}, format="json")
    text_trigger = make_trigger(owner_client, echo.json()["id"])
    answered = send(text_trigger, "plain words", "text/plain", signed=True)
    assert answered.status_code == 200 and answered.json()["output"] == "plain words"
    signed = send(trigger, signed=True).request
    headers = {name: signed[name] for name in ("HTTP_X_AGENTSITE_TIMESTAMP", "HTTP_X_AGENTSITE_SIGNATURE")}
    other_body = APIClient().generic("POST", f"/hooks/{trigger['id']}", b'{"n": 22}', content_type="application/json",
                                     **headers)
    refused(other_body, 401, "signature_invalid")


def test_a_stale_or_replayed_signature_is_refused(owner_client, workflow_id, audit_minute):
    trigger = make_trigger(owner_client, workflow_id)
    # Past the 300 s window by 5 s on either side, each stamp read just before its request: a whole-second stamp
    # read once and 1 s over could fall back inside by the time a loaded machine sent the second request.
    refused(send(trigger, signed=True, stamp=int(time.time()) - 305), 401, "signature_expired")
    refused(send(trigger, signed=True, stamp=int(time.time()) + 305), 401, "signature_expired")
    stamp = int(time.time())
    assert send(trigger, signed=True, stamp=stamp).status_code == 200
    refused(send(trigger, signed=True, stamp=stamp), 409, "signature_replayed")
    # The refusals are in the audit log, naming the trigger (the second expiry of the minute only counted: the
    # flood rule, tests/workflows/test_webhook_audit.py); the accepted request is not.
    audited = AuditEvent.objects.filter(action="webhook.refused", target=f"trigger:{trigger['id']}").order_by("id")
    assert [row.details["code"] for row in audited] == ["signature_expired", "signature_replayed"]
    assert WorkflowRun.objects.count() == 1


def test_strict_content_types_and_the_size_limit(owner_client, workflow_id):
    trigger = make_trigger(owner_client, workflow_id)
    for content_type in ("application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "text/html",
                         "application/xml", "text/plain; charset=latin-1"):
        refused(send(trigger, "n=21", content_type), 415, "unsupported_media_type")
    refused(send(trigger, "{not json"), 400, "invalid")
    refused(send(trigger, b'{"n": "' + b"x" * (10 * 1024 * 1024) + b'"}'), 413, "payload_too_large")
    assert WorkflowRun.objects.count() == 0


def test_disabled_and_rotated_refuse_at_once(owner_client, workflow_id):
    trigger = make_trigger(owner_client, workflow_id)
    path = f"/api/workflows/{workflow_id}/triggers/{trigger['id']}"
    assert owner_client.patch(path, {"enabled": False}, format="json").json()["enabled"] is False
    refused(send(trigger), 403, "trigger_disabled")
    assert owner_client.patch(path, {"enabled": True}, format="json").status_code == 200
    rotated = owner_client.post(f"{path}/rotate").json()
    assert rotated["secret"] != trigger["secret"]
    refused(send(trigger), 401, "signature_invalid")
    assert send({**trigger, "secret": rotated["secret"]}).status_code == 200
    assert owner_client.delete(path).status_code == 204
    refused(send(rotated), 404, "not_found")


@pytest.mark.parametrize("rate", [1, 3])
def test_a_trigger_passes_its_rate_a_minute_and_refuses_the_next(owner_client, workflow_id, monkeypatch, rate):
    # The window is the wall clock's minute: the requests are sent at a fixed instant 50 s into one, so none of
    # them falls into the next minute's window however slow the machine.
    clock = {"now": 1_800_000_000 // 60 * 60 + 50.0}
    monkeypatch.setattr("workflows.triggers.time", SimpleNamespace(time=lambda: clock["now"]))
    trigger = make_trigger(owner_client, workflow_id, rate_per_minute=rate)
    assert [send(trigger).status_code for _ in range(rate)] == [200] * rate
    limited = send(trigger)
    refused(limited, 429, "rate_limited")
    assert limited["Retry-After"] == "10"
    clock["now"] += 9.9  # still the same minute
    refused(send(trigger), 429, "rate_limited")
    clock["now"] += 0.1  # the next minute: a new window
    assert [send(trigger).status_code for _ in range(rate)] == [200] * rate
    refused(send(trigger), 429, "rate_limited")


def test_async_answers_202_and_the_queue_runs_it(owner_client, workflow_id):
    trigger = make_trigger(owner_client, workflow_id, mode="async")
    response = send(trigger)
    assert response.status_code == 202, response.content
    assert response.json()["status"] == "queued"
    assert workflow_run_task(response.json()["id"]) == "success"
    assert WorkflowRun.objects.get(pk=response.json()["id"]).output == "42"


def test_a_trigger_may_pin_a_version(owner_client, workflow_id):
    changed = graph(node("in", "input"), node("calc", "code", code="return JSON.parse(input).n * 3;"),
                    node("out", "output"), edges=[("in", "calc"), ("calc", "out")])
    assert owner_client.patch(f"/api/workflows/{workflow_id}", changed, format="json").status_code == 200
    pinned = make_trigger(owner_client, workflow_id, version=1)
    latest = make_trigger(owner_client, workflow_id)
    assert (send(pinned).json()["output"], send(latest).json()["output"]) == ("42", "63")
    bad = owner_client.post(f"/api/workflows/{workflow_id}/triggers", {"version": 9}, format="json")
    refused(bad, 400, "invalid")


def test_another_users_triggers_are_not_found(owner_client, other_client, workflow_id):
    trigger = make_trigger(owner_client, workflow_id)
    base = f"/api/workflows/{workflow_id}/triggers"
    assert other_client.get(base).status_code == 404
    assert other_client.post(base, {}, format="json").status_code == 404
    assert other_client.patch(f"{base}/{trigger['id']}", {"enabled": False}, format="json").status_code == 404
    assert other_client.post(f"{base}/{trigger['id']}/rotate").status_code == 404
    assert other_client.delete(f"{base}/{trigger['id']}").status_code == 404
    assert send(trigger).status_code == 200
    refused(APIClient().get(f"/hooks/{trigger['id']}"), 405, "method_not_allowed")


def test_the_owners_spent_budget_refuses_before_a_run(owner, owner_client, workflow_id):
    from usage import budgets
    from usage.services import budget_set

    trigger = make_trigger(owner_client, workflow_id)
    budget_set(user_id=owner.pk, budget={"tokens_per_day": 10})
    scopes = [budgets.Scope(f"u:{owner.pk}", {"tokens_per_day": 10})]
    budgets.reserve(scopes)  # an LLM call of 11 tokens, as the metering records one
    budgets.settle(scopes, 11, 0.0)
    refused(send(trigger), 429, "budget_exceeded")
    assert WorkflowRun.objects.count() == 0


def test_a_webhook_skips_the_browser_middleware(owner_client, workflow_id, monkeypatch):
    """POST /hooks/<id> authenticates by its own secret or signature, never a session or a CSRF cookie: Django's
    browser stack (sessions, CSRF, auth, messages: sync, a thread crossing each on an async view) is not run
    for it, as for /api and /v1. Through that stack a webhook run cost ~3 ms more server CPU than an API run."""
    from django.contrib.sessions.middleware import SessionMiddleware

    seen: list[str] = []
    original = SessionMiddleware.process_request
    monkeypatch.setattr(SessionMiddleware, "process_request",
                        lambda self, request: (seen.append(request.path), original(self, request))[1])
    trigger = make_trigger(owner_client, workflow_id)
    assert send(trigger).status_code == 200
    APIClient().get("/admin/login/")  # a browser page: through the stack (the spy sees it)
    assert seen == ["/admin/login/"]


def padded(chars: int, pad: str = "x") -> str:
    """A JSON body for DOUBLE of exactly `chars` characters (`pad` a one-character string)."""
    head = '{"n": 21, "pad": "'
    return head + pad * (chars - len(head) - 2) + '"}'


@pytest.mark.parametrize("pad", ["x", "\u00e9", "\U0001f600"])  # 1, 2 and 4 bytes a character in UTF-8
def test_an_input_at_the_run_limit_runs_and_one_character_more_is_a_413_naming_it(owner_client, workflow_id, pad):
    trigger = make_trigger(owner_client, workflow_id, rate_per_minute=100)
    at_limit = padded(MAX_INPUT_CHARS, pad)
    response = send(trigger, at_limit)
    assert response.status_code == 200, response.content[:500]
    assert (response.json()["output"], response.json()["input_chars"]) == ("42", MAX_INPUT_CHARS)
    assert at_limit[:50] not in response.content.decode()  # the input is not echoed back
    assert len(WorkflowRun.objects.get().input) == MAX_INPUT_CHARS

    response = send(trigger, padded(MAX_INPUT_CHARS + 1, pad))
    refused(response, 413, "payload_too_large")
    assert response.json()["error"]["details"]["limit_chars"] == MAX_INPUT_CHARS
    assert str(MAX_INPUT_CHARS) in response.json()["error"]["message"]
    assert WorkflowRun.objects.count() == 1


def test_a_body_too_long_to_hold_the_limits_characters_is_refused_before_it_is_read(owner_client, workflow_id):
    trigger = make_trigger(owner_client, workflow_id)
    response = send(trigger, "x" * (4 * MAX_INPUT_CHARS + 1), "text/plain")
    refused(response, 413, "payload_too_large")
    assert response.json()["error"]["details"]["limit_chars"] == MAX_INPUT_CHARS
    assert WorkflowRun.objects.count() == 0


def test_an_async_webhook_answers_without_echoing_the_input(owner_client, workflow_id):
    trigger = make_trigger(owner_client, workflow_id, mode="async")
    response = send(trigger, '{"n": 4, "note": "do not echo me"}')
    assert response.status_code == 202, response.content
    assert "do not echo me" not in response.content.decode() and response.json()["input_chars"] == 34

"""Audit and metrics of API keys and budgets (issue 28, after the keys and usage work): key creation and
revocation, a key used outside its scopes, budget changes, and agentsite_budget_refusals_total counting a real
refusal before the upstream is asked."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from accounts.models import AuditEvent
from agentsite.agent.providers import OpenAIProvider, collect
from agentsite.agent.types import ChatRequest, Message
from agentsite.agent.usage import Caller, metered
from agentsite.core import metrics
from agentsite.core.errors import AppError
from tests.fakes.llm import Text
from usage import budgets, buffer


def _rows(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("id"))


@pytest.mark.django_db
def test_key_creation_revocation_scope_refusal_and_budget_changes_are_audited(owner, owner_client, admin,
                                                                              admin_client):
    made = owner_client.post("/api/keys", {"name": "ci", "scopes": ["v1"]}, format="json")
    assert made.status_code == 201, made.content
    key_id, secret = made.json()["id"], made.json()["key"]
    created = _rows("key.create")
    assert len(created) == 1 and created[0].actor_id == owner.pk and created[0].target == f"key:{key_id}"
    assert created[0].details["scopes"] == ["v1"]

    with_key = APIClient(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert with_key.get("/api/sessions").status_code == 403  # a v1 key on /api
    refused = _rows("key.scope_refused")
    assert len(refused) == 1 and refused[0].outcome == "refused" and refused[0].door == "key"
    assert refused[0].details == {"scope": "api", "where": "/api", "owner_id": owner.pk}

    assert owner_client.patch(f"/api/keys/{key_id}", {"budget": {"tokens_per_day": 1000}},
                              format="json").status_code == 200
    assert owner_client.patch(f"/api/keys/{key_id}", {"name": "renamed"}, format="json").status_code == 200
    assert admin_client.put(f"/api/users/{owner.pk}/budget", {"tokens_per_day": 5000},
                            format="json").status_code == 200
    changes = [(e.actor_id, e.target, e.details["fields"]) for e in _rows("budget.change")]
    assert changes == [(owner.pk, f"key:{key_id}", ["tokens_per_day"]),
                       (admin.pk, f"user:{owner.pk}", ["tokens_per_day"])]

    assert owner_client.delete(f"/api/keys/{key_id}").status_code == 204
    revoked = _rows("key.revoke")
    assert len(revoked) == 1 and revoked[0].actor_id == owner.pk and revoked[0].target == f"key:{key_id}"
    everything = json.dumps(list(AuditEvent.objects.values()), default=str)
    assert secret not in everything


@pytest.mark.django_db(transaction=True)
async def test_a_budget_refusal_is_counted(fake_openai, owner, monkeypatch, one_minute):
    monkeypatch.setattr(metrics, "ENABLED", True)
    monkeypatch.delenv(metrics.MULTIPROC_ENV, raising=False)
    buffer.flush()
    budgets.drop_user_budget(None)
    counter = metrics._m()["budget_refusals"]
    before = counter._value.get()
    fake_openai.script(*[Text("answer", usage=(1, 1)) for _ in range(3)])
    provider = OpenAIProvider(base_url=fake_openai.base_url, api_key="sk-test", model="fake-model", timeout=10)
    with_key = metered(provider, Caller(owner.pk, "k-metrics", "v1", {"requests_per_minute": 1}))
    request = ChatRequest([Message("user", "hello")])
    await collect(with_key.stream(request))
    with pytest.raises(AppError):
        await collect(with_key.stream(request))
    assert counter._value.get() - before == 1
    buffer.flush()

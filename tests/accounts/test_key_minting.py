"""A key that makes keys never gives more than it has: the keys it mints have a subset of its scopes, a budget no
looser and an expiry no later than its own; it cannot change its own budget (nor a key it did not make); and
revoking a key revokes every key below it, refused at once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from accounts import services
from accounts.authentication import key_digest, keys
from accounts.models import ApiKey, AuditEvent
from agentsite.core.errors import AppError
from tests.conftest import client_for

pytestmark = pytest.mark.django_db

PARENT_BUDGET = {"tokens_per_day": 100, "cost_per_day": 1.5}


def _key_client(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def _mint(client: APIClient, **fields):
    return client.post("/api/keys", {"name": "child", **fields}, format="json")


def _parent(user, **fields) -> tuple[str, int]:
    answer = _mint(client_for(user), scopes=["v1", "api"], **fields)
    assert answer.status_code == 201, answer.content
    return answer.json()["key"], answer.json()["id"]


def test_a_key_mints_a_key_with_a_subset_of_its_scopes_and_records_itself_as_parent(owner):
    secret, parent_id = _parent(owner)
    answer = _mint(_key_client(secret), scopes=["v1"])
    assert answer.status_code == 201, answer.content
    assert answer.json()["created_by_key"] == parent_id and answer.json()["scopes"] == ["v1"]
    assert ApiKey.objects.get(pk=answer.json()["id"]).created_by_key_id == parent_id
    assert _mint(_key_client(secret), scopes=["v1", "api"]).status_code == 201  # all of them: a subset too
    made = AuditEvent.objects.filter(action="key.create", target=f"key:{answer.json()['id']}").get()
    assert made.details["key_id"] == parent_id and made.door == "key"


@pytest.mark.parametrize("scopes", [["mcp"], ["v1", "mcp"], ["admin"]])
def test_a_key_may_not_mint_a_scope_it_lacks(owner, scopes):
    secret, _ = _parent(owner)
    answer = _mint(_key_client(secret), scopes=scopes)
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "forbidden"
    assert ApiKey.objects.count() == 1


def test_an_admins_key_without_the_admin_scope_may_not_mint_an_admin_key(admin):
    secret, _ = _parent(admin)
    answer = _mint(_key_client(secret), scopes=["api", "admin"])
    assert answer.status_code == 403 and ApiKey.objects.count() == 1


@pytest.mark.parametrize(("budget", "status"), [
    (PARENT_BUDGET, 201),  # equal: the boundary, allowed
    ({"tokens_per_day": 99, "cost_per_day": 1.5, "requests_per_minute": 3}, 201),  # tighter, and a limit more
    ({"tokens_per_day": 101, "cost_per_day": 1.5}, 403),  # one above
    ({"tokens_per_day": 100, "cost_per_day": 1.5001}, 403),
    ({"tokens_per_day": 100}, 403),  # a limit the parent has, missing: no limit is looser
    ({"tokens_per_day": 100, "cost_per_day": None}, 403),
    (None, 403),  # no budget at all
])
def test_a_minted_budget_is_no_looser_than_the_parents(owner, budget, status):
    secret, _ = _parent(owner, budget=PARENT_BUDGET)
    answer = _mint(_key_client(secret), scopes=["v1"], budget=budget)
    assert answer.status_code == status, answer.content
    if status == 403:
        assert answer.json()["error"]["code"] == "forbidden" and "budget" in answer.json()["error"]["details"]
        assert ApiKey.objects.count() == 1


def test_a_key_without_a_budget_mints_any_budget_or_none(owner):
    secret, _ = _parent(owner)
    assert _mint(_key_client(secret), scopes=["v1"]).status_code == 201
    assert _mint(_key_client(secret), scopes=["v1"], budget={"tokens_per_day": 10**9}).status_code == 201


def test_a_minted_key_expires_no_later_than_its_parent(owner):
    expires = (timezone.now() + timedelta(days=1)).replace(microsecond=0)
    secret, _ = _parent(owner, expires_at=expires.isoformat())
    client = _key_client(secret)
    assert _mint(client, scopes=["v1"], expires_at=expires.isoformat()).status_code == 201  # the same: allowed
    assert _mint(client, scopes=["v1"], expires_at=(expires - timedelta(hours=1)).isoformat()).status_code == 201
    later = _mint(client, scopes=["v1"], expires_at=(expires + timedelta(seconds=1)).isoformat())
    assert later.status_code == 403 and "expires_at" in later.json()["error"]["details"]
    never = _mint(client, scopes=["v1"])
    assert never.status_code == 403 and ApiKey.objects.count() == 3


def test_a_key_may_not_change_its_own_budget(owner):
    secret, key_id = _parent(owner, budget=PARENT_BUDGET)
    for budget in (None, {"tokens_per_day": 10**9, "cost_per_day": 1.5}, {"tokens_per_day": 1, "cost_per_day": 1}):
        answer = _key_client(secret).patch(f"/api/keys/{key_id}", {"budget": budget}, format="json")
        assert answer.status_code == 403 and answer.json()["error"]["code"] == "forbidden"
    assert ApiKey.objects.get(pk=key_id).budget == PARENT_BUDGET
    renamed = _key_client(secret).patch(f"/api/keys/{key_id}", {"name": "renamed"}, format="json")
    assert renamed.status_code == 200 and renamed.json()["budget"] == PARENT_BUDGET
    # Its user, with a dashboard token, still may.
    assert client_for(owner).patch(f"/api/keys/{key_id}", {"budget": None}, format="json").status_code == 200


def test_a_key_may_not_lift_the_budget_of_a_key_it_did_not_make(owner):
    secret, _ = _parent(owner)
    _, sibling = _parent(owner, budget=PARENT_BUDGET)
    answer = _key_client(secret).patch(f"/api/keys/{sibling}", {"budget": None}, format="json")
    assert answer.status_code == 403 and ApiKey.objects.get(pk=sibling).budget == PARENT_BUDGET
    # Nor a child its parent: two keys cannot lift each other's budgets either.
    child = _mint(_key_client(secret), scopes=["v1", "api"]).json()
    up = _key_client(child["key"]).patch(f"/api/keys/{child['created_by_key']}", {"budget": {}}, format="json")
    assert up.status_code == 403


def test_a_key_sets_the_budget_of_a_key_it_made_within_its_own(owner):
    secret, _ = _parent(owner, budget=PARENT_BUDGET)
    child = _mint(_key_client(secret), scopes=["v1", "api"], budget=PARENT_BUDGET).json()
    grandchild = _mint(_key_client(child["key"]), scopes=["v1"], budget=PARENT_BUDGET).json()
    client = _key_client(secret)
    tighter = {"tokens_per_day": 10, "cost_per_day": 1.5}
    assert client.patch(f"/api/keys/{grandchild['id']}", {"budget": tighter}, format="json").status_code == 200
    looser = client.patch(f"/api/keys/{child['id']}", {"budget": {"tokens_per_day": 101, "cost_per_day": 1.5}},
                          format="json")
    assert looser.status_code == 403 and ApiKey.objects.get(pk=child["id"]).budget == PARENT_BUDGET


def _me(secret: str) -> int:
    return _key_client(secret).get("/api/auth/me").status_code


def test_revoking_a_key_revokes_every_key_below_it_at_once(owner):
    root, root_id = _parent(owner)
    child = _mint(_key_client(root), scopes=["v1", "api"]).json()
    grandchild = _mint(_key_client(child["key"]), scopes=["v1", "api"]).json()
    sibling, sibling_id = _parent(owner)
    for secret in (root, child["key"], grandchild["key"], sibling):
        assert _me(secret) == 200  # each cached in this process now
    assert keys.fresh(key_digest(grandchild["key"]))[0]
    assert client_for(owner).delete(f"/api/keys/{root_id}").status_code == 204
    for secret in (root, child["key"], grandchild["key"]):
        assert _me(secret) == 401, "a key below the revoked one still works"
    assert _me(sibling) == 200
    rows = {row.pk: row for row in ApiKey.objects.all()}
    assert all(rows[pk].revoked and rows[pk].revoked_at for pk in (root_id, child["id"], grandchild["id"]))
    assert not rows[sibling_id].revoked
    event = AuditEvent.objects.get(action="key.revoke", target=f"key:{root_id}")
    assert event.details["revoked_below"] == 2


def test_revoking_a_key_in_the_middle_leaves_its_parent_and_takes_its_children(owner):
    root, root_id = _parent(owner)
    child = _mint(_key_client(root), scopes=["v1", "api"]).json()
    grandchild = _mint(_key_client(child["key"]), scopes=["v1"]).json()
    assert _key_client(child["key"]).delete(f"/api/keys/{child['id']}").status_code == 204  # a key revokes itself
    assert not ApiKey.objects.get(pk=root_id).revoked
    assert ApiKey.objects.get(pk=grandchild["id"]).revoked
    assert _me(root) == 200


def test_a_key_revoked_meanwhile_mints_nothing(owner):
    secret, parent_id = _parent(owner)
    seen = ApiKey.objects.get(pk=parent_id)  # as a request authenticated a moment before the revocation
    ApiKey.objects.filter(pk=parent_id).update(revoked=True, revoked_at=timezone.now())
    with pytest.raises(AppError) as refused:
        services.key_create(user=owner, name="late", scopes=["v1"], parent=seen)
    assert refused.value.status == 401
    assert not ApiKey.objects.filter(revoked=False).exists()


def test_revoking_in_django_admin_revokes_the_keys_below(admin, client):
    root, root_id = _parent(admin)
    child = _mint(_key_client(root), scopes=["v1"]).json()
    row = ApiKey.objects.get(pk=root_id)
    row.revoked = True
    from django.contrib import admin as django_admin

    from accounts.admin import ApiKeyAdmin

    ApiKeyAdmin(ApiKey, django_admin.site).save_model(None, row, None, True)
    assert ApiKey.objects.get(pk=child["id"]).revoked

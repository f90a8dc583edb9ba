"""A group's budget across two processes (PostgreSQL + Redis): the members' calls on either count together, and a
member removed through one process is free of the group's budget on the other, which had their groups cached."""

from __future__ import annotations

import secrets

import pytest
import requests

from tests.e2e import poll
from tests.fakes.llm import Text
from tests.usage.test_two_processes import two_processes  # noqa: F401 - the fixture: two servers, one database

pytestmark = pytest.mark.e2e

PASSWORD = "a-long-enough-password-1"


def _user(server, name: str) -> tuple[int, dict]:
    response = requests.post(f"{server.base_url}/api/auth/register", json={"username": name, "password": PASSWORD},
                             timeout=10)
    assert response.status_code == 201, response.text
    return int(response.json()["user"]["id"]), {"Authorization": f"Bearer {response.json()['token']}"}


def _call(server, headers: dict) -> int:
    return requests.post(f"{server.base_url}/v1/chat/completions", headers=headers, timeout=10, json={
        "model": "fake-model", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]}).status_code


def test_a_groups_budget_counts_both_processes_and_a_removal_reaches_the_other(two_processes,  # noqa: F811
                                                                              fake_openai):
    first, second, admin = two_processes
    suffix = secrets.token_hex(3)
    ann, ann_headers = _user(first, f"ann-{suffix}")
    bob, bob_headers = _user(first, f"bob-{suffix}")
    group = requests.post(f"{first.base_url}/api/groups", json={"name": f"team-{suffix}"}, headers=admin,
                          timeout=10).json()["id"]
    for user in (ann, bob):
        added = requests.post(f"{first.base_url}/api/groups/{group}/members", json={"user": user}, headers=admin,
                              timeout=10)
        assert added.status_code == 201, added.text
    put = requests.put(f"{first.base_url}/api/groups/{group}/budget", json={"tokens_per_day": 4}, headers=admin,
                       timeout=10)
    assert put.status_code == 200, put.text
    fake_openai.script(*[Text("ok", usage=(1, 1)) for _ in range(10)])
    # Each call reserves 2 (1 of prompt, max_tokens 1) and uses 2: bob on the second, ann on the first, then
    # nothing is left for bob on the second, which now has his groups cached.
    assert [_call(second, bob_headers), _call(first, ann_headers), _call(second, bob_headers)] == [200, 200, 429]
    removed = requests.delete(f"{first.base_url}/api/groups/{group}/members/{bob}", headers=admin, timeout=10)
    assert removed.status_code == 204
    # Within a second: the announcement, not the cache's 2 s time to live, frees him.
    poll(lambda: _call(second, bob_headers) == 200, "bob free of the group's budget on the other process", 1.0)
    assert _call(first, ann_headers) == 429  # still a member
    assert len(fake_openai.bodies()) == 3

"""API keys on the /v1 doors test_api_keys.py does not walk: /v1/responses (create and retrieve), /v1/messages
(and count_tokens) and /v1/embeddings. A key with the `v1` scope is served on each, on both headers; a key
without it is a 403 in each door's own envelope; a key that died (every way a key dies) is a 401 at once."""

from __future__ import annotations

import pytest
from django.test import Client

from accounts.models import ApiKey
from tests.accounts.test_api_keys import DEATHS
from tests.conftest import client_for

pytestmark = pytest.mark.django_db

MESSAGES = [{"role": "user", "content": "hi"}]
# (path, body or None for a GET, the status a served request answers, the envelope: openai or anthropic)
DOORS = [
    ("/v1/responses", {"model": "agent", "input": "hi"}, 200, "openai"),
    ("/v1/responses/resp_unknown", None, 404, "openai"),
    ("/v1/messages", {"model": "agent", "max_tokens": 5, "messages": MESSAGES}, 200, "anthropic"),
    ("/v1/messages/count_tokens", {"model": "agent", "messages": MESSAGES}, 200, "anthropic"),
    ("/v1/embeddings", {"model": "hash-256", "input": "hi"}, 200, "openai"),
]
HEADERS = ("bearer", "x-api-key")


def _make(user, scopes: list[str]) -> str:
    answer = client_for(user).post("/api/keys", {"name": "doors", "scopes": scopes}, format="json")
    assert answer.status_code == 201, answer.content
    return answer.json()["key"]


def _call(secret: str, header: str, path: str, body: dict | None):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {secret}"} if header == "bearer" else {"HTTP_X_API_KEY": secret}
    if body is None:
        return Client().get(path, **headers)
    return Client().post(path, body, content_type="application/json", **headers)


def _error_type(answer, envelope: str) -> str:
    body = answer.json()
    if envelope == "anthropic":
        assert body["type"] == "error", body
    return body["error"]["type"]


def test_a_v1_key_is_served_on_every_door_and_header(owner):
    secret = _make(owner, scopes=["v1"])
    for path, body, served, _ in DOORS:
        for header in HEADERS:
            answer = _call(secret, header, path, body)
            assert answer.status_code == served, (path, header, answer.content[:300])


# Committed: an async door writes its key.scope_refused audit row on a thread of its own (tests/accounts/
# test_api_keys.py says why a test's open transaction would hold it).
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("scopes", [["api"], ["mcp"], ["api", "mcp"]])
def test_a_key_without_the_v1_scope_is_a_403_in_each_doors_envelope(owner, scopes):
    secret = _make(owner, scopes=scopes)
    for path, body, _, envelope in DOORS:
        for header in HEADERS:
            answer = _call(secret, header, path, body)
            assert answer.status_code == 403, (path, header, answer.content[:300])
            assert _error_type(answer, envelope) == "permission_error", path
            if envelope == "openai":
                assert answer.json()["error"]["code"] == "key_scope"


@pytest.mark.parametrize("death", sorted(DEATHS))
def test_a_dead_key_is_refused_at_once_on_every_door_and_header(owner, death):
    secret = _make(owner, scopes=["v1", "api"])
    key = ApiKey.objects.get()
    for path, body, served, _ in DOORS:
        assert _call(secret, "bearer", path, body).status_code == served  # cached now
    DEATHS[death](owner, key)
    for path, body, _, envelope in DOORS:
        for header in HEADERS:
            answer = _call(secret, header, path, body)
            assert answer.status_code == 401, (death, path, header, answer.content[:300])
            assert _error_type(answer, envelope) == "authentication_error", path
            if envelope == "openai":
                assert answer.json()["error"]["code"] == "invalid_api_key"

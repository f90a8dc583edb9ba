"""The A2A door in this process (fast tier), through the ASGI application daphne serves: who gets which answer
before the SDK sees a request, public cards and the deployment's card (a2a_app.server.asgi, a2a_app.views)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings

from accounts.services import key_create
from tests.e2e import poll

# Committed: the door reads on dbcall's threads, and writes its key.scope_refused audit row on a thread of its own.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def slug(owner) -> str:
    """An agent of owner's (private): each transactional test starts from an empty database."""
    from tests.conftest import client_for

    made = client_for(owner).post("/api/agents", {"slug": "door-agent", "name": "Door"}, format="json")
    assert made.status_code == 201, made.content
    return "door-agent"


def _served(method: str, path: str, headers: dict[str, str] | None = None, body: bytes | None = None
            ) -> httpx.Response:
    from agentsite.asgi import application

    async def send() -> httpx.Response:
        transport = httpx.ASGITransport(app=application, client=("127.0.0.1", 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=10) as client:
            return await client.request(method, path, headers=headers or {}, content=body)

    return async_to_sync(send)()


def _key(user: Any, scopes: list[str]) -> dict[str, str]:
    _key_row, secret = key_create(user=user, name="door", scopes=scopes)
    return {"Authorization": f"Bearer {secret}"}


def test_with_a_credential_the_door_answers_each_wrong_request_in_the_envelope(owner, slug):
    headers = _key(owner, ["a2a"])
    card = _served("GET", f"/a2a/{slug}/.well-known/agent-card.json", headers)
    assert card.status_code == 200 and card.json()["skills"][0]["id"] == slug
    assert _served("GET", f"/a2a/{slug}", headers).status_code == 405
    assert _served("POST", f"/a2a/{slug}/.well-known/agent-card.json", headers).status_code == 405
    for path in ("/a2a", "/a2a/", "/a2a/door-agent/more", "/a2a/NOT_A_SLUG", "/a2a/" + "x" * 65):
        answer = _served("POST", path, headers, b"{}")
        assert (answer.status_code, answer.json()["error"]["code"]) == (404, "not_found"), path
    # JSON-RPC itself: a body that is not JSON is the SDK's parse error, in JSON-RPC's shape.
    parsed = _served("POST", f"/a2a/{slug}", {**headers, "Content-Type": "application/json"}, b"{not json")
    assert parsed.status_code == 200 and parsed.json()["error"]["code"] == -32700


def test_a_card_needs_a_credential_unless_its_agent_is_public(owner, slug):
    card = f"/a2a/{slug}/.well-known/agent-card.json"
    assert _served("GET", card).status_code == 401
    deployment = _served("GET", "/.well-known/agent-card.json")
    assert deployment.status_code == 200 and deployment.json()["skills"] == []
    with override_settings(AGENTSITE_A2A_PUBLIC_AGENTS=[slug, "no-such-agent"]):
        public = _served("GET", card)
        assert public.status_code == 200 and public.json()["name"]
        listed = _served("GET", "/.well-known/agent-card.json").json()
        assert [skill["id"] for skill in listed["skills"]] == [slug]  # an agent that does not exist: left out
        assert f"http://127.0.0.1/a2a/{slug}" in listed["skills"][0]["description"]
        # A credential sent anyway must stand; a public card is never a way to use the agent.
        dead = _served("GET", card, {"Authorization": "Bearer ask-nothing-of-the-sort-00000000000000"})
        assert dead.status_code == 401 and dead.json()["error"]["code"] == "token_invalid"
        assert _served("POST", f"/a2a/{slug}", {}, b"{}").status_code == 401


def test_the_key_scope_decides_and_a_refusal_is_audited(owner, slug):
    from accounts.models import AuditEvent

    refused = _served("POST", f"/a2a/{slug}", _key(owner, ["v1", "mcp", "api"]), b"{}")
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "key_scope")
    assert "needs 'a2a'" in refused.json()["error"]["message"]
    poll(lambda: AuditEvent.objects.filter(action="key.scope_refused", details__scope="a2a").exists(),
         "the refusal audited", timeout=10)


def test_host_origin_and_cors_preflight_come_before_anything_else(slug, settings):
    settings.CORS_ALLOWED_ORIGINS = ["https://app.example"]
    foreign = _served("POST", f"/a2a/{slug}", {"Host": "evil.example"}, b"{}")
    assert (foreign.status_code, foreign.json()["error"]["code"]) == (400, "invalid_host")
    asked = _served("OPTIONS", f"/a2a/{slug}", {"Origin": "https://app.example",
                                                "Access-Control-Request-Method": "POST",
                                                "Access-Control-Request-Headers": "authorization, a2a-version"})
    assert asked.status_code == 204
    assert asked.headers["access-control-allow-origin"] == "https://app.example"
    assert asked.headers["access-control-allow-methods"] == "GET, POST, OPTIONS"
    other = _served("POST", f"/a2a/{slug}", {"Origin": "https://elsewhere.example"}, b"{}")
    assert (other.status_code, other.json()["error"]["code"]) == (403, "forbidden")
    # An allowed origin reads the refusal, and the header that says how to authenticate.
    refused = _served("POST", f"/a2a/{slug}", {"Origin": "https://app.example"}, b"{}")
    assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == "https://app.example"
    assert "www-authenticate" in refused.headers["access-control-expose-headers"]

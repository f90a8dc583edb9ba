"""API keys on a real daphne server (issue 27), `compat_auth: key`: the official `openai` SDK with a key (as its
api_key, and in `x-api-key` through default_headers), the official `anthropic` SDK's own authentication
(`x-api-key`) against /v1/models, every way a key dies refused on every door (/v1 with either header, /api, the
/mcp transports) in that door's envelope, scopes, and `last_used_at` recorded off the request path.

Open streams cut by a dying key: tests/accounts/test_stream_revocation.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anthropic
import openai
import pytest
import requests
from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

from tests.accounts.test_stream_revocation import (
    User,
    change_password,
    deactivate_in_admin,
    delete_in_admin,
)
from tests.e2e import poll, server_with_fake_upstream
from tests.fakes.llm import Text

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def live(fake_openai_server):
    server, admin = server_with_fake_upstream(fake_openai_server)
    requests.patch(f"{server.base_url}/api/config", headers=admin, timeout=10,
                   json={"compat_auth": "key"}).raise_for_status()
    yield server
    server.stop()


def make_key(user: User, **fields) -> dict:
    answer = user.post("/api/keys", {"name": "sdk", **fields})
    assert answer.status_code == 201, answer.text
    return answer.json()


# --- the SDKs --------------------------------------------------------------------------------------------

def test_the_openai_sdk_works_with_a_key_and_fails_cleanly_without_one(live, fake_openai):
    secret = make_key(User(live))["key"]
    client = openai.OpenAI(base_url=f"{live.base_url}/v1", api_key=secret, max_retries=0)
    assert "default/fake-model" in [model.id for model in client.models.list()]
    fake_openai.script(Text("Hi with a key.", usage=(4, 4)))
    completion = client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "hi"}])
    assert completion.choices[0].message.content == "Hi with a key."
    fake_openai.script(Text("one two", pieces=["one ", "two"]))
    stream = client.chat.completions.create(model="fake-model", stream=True,
                                            messages=[{"role": "user", "content": "hi"}])
    assert "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices) == "one two"
    anonymous = openai.OpenAI(base_url=f"{live.base_url}/v1", api_key="sk-placeholder", max_retries=0)
    with pytest.raises(openai.AuthenticationError, match="compat_auth"):
        anonymous.models.list()
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{live.base_url}/v1", api_key=secret[:-2] + "xx", max_retries=0).models.list()


def test_the_openai_sdk_sends_the_key_in_x_api_key_with_the_same_result(live, fake_openai):
    user = User(live)
    key = make_key(user)
    client = openai.OpenAI(base_url=f"{live.base_url}/v1", api_key="placeholder", max_retries=0,
                           default_headers={"x-api-key": key["key"]})
    assert "default/fake-model" in [model.id for model in client.models.list()]
    fake_openai.script(Text("Hi through x-api-key."))
    completion = client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "hi"}])
    assert completion.choices[0].message.content == "Hi through x-api-key."
    requests.delete(f"{live.base_url}/api/keys/{key['id']}", headers={"Authorization": f"Bearer {user.token}"},
                    timeout=10).raise_for_status()
    with pytest.raises(openai.AuthenticationError, match="revoked"):
        client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "hi"}])


def test_the_anthropic_sdk_authenticates_with_a_key_in_its_own_header_and_in_x_api_key(live, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    user = User(live)
    key = make_key(user)
    # The SDK's own authentication from api_key (x-api-key in older releases, Authorization: Bearer in the one
    # installed here: either is accepted with the same checks), and x-api-key set explicitly, as Anthropic's
    # clients send it.
    own = anthropic.Anthropic(base_url=live.base_url, api_key=key["key"], max_retries=0)
    header = anthropic.Anthropic(base_url=live.base_url, max_retries=0, default_headers={"x-api-key": key["key"]})
    for client in (own, header):
        raw = client.models.with_raw_response.list()
        sent = raw.http_request.headers
        assert key["key"] in (sent.get("x-api-key"), sent.get("authorization", "").removeprefix("Bearer "))
        listed = [item["id"] for item in raw.http_response.json()["data"]]
        assert raw.status_code == 200 and "default/fake-model" in listed
        assert "default/fake-model" in [model.id for model in client.models.list()]
    assert header.models.with_raw_response.list().http_request.headers.get("authorization") is None
    wrong_scope = make_key(user, scopes=["mcp"])["key"]
    for client in (anthropic.Anthropic(base_url=live.base_url, api_key=wrong_scope, max_retries=0),
                   anthropic.Anthropic(base_url=live.base_url, max_retries=0,
                                       default_headers={"x-api-key": wrong_scope})):
        with pytest.raises(anthropic.PermissionDeniedError):
            client.models.list()
    requests.delete(f"{live.base_url}/api/keys/{key['id']}", headers={"Authorization": f"Bearer {user.token}"},
                    timeout=10).raise_for_status()
    for client in (own, header):
        with pytest.raises(anthropic.AuthenticationError):
            client.models.list()


# --- every way a key dies, on every door -----------------------------------------------------------------

def _revoke(live, user: User) -> None:
    requests.delete(f"{live.base_url}/api/keys/{user.key_id}", headers={"Authorization": f"Bearer {user.token}"},
                    timeout=10).raise_for_status()


def _password(live, user: User) -> None:
    change_password(live, user)


DEATHS = {"revoked": _revoke, "password_changed": _password, "deactivated": deactivate_in_admin,
          "user_deleted": delete_in_admin, "expired": None}

MCP_INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}


def _doors(live, secret: str) -> dict[str, requests.Response]:
    """One request through each door with the key."""
    bearer = {"Authorization": f"Bearer {secret}"}
    chat = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
    return {
        "/v1/models bearer": requests.get(f"{live.base_url}/v1/models", headers=bearer, timeout=10),
        "/v1/models x-api-key": requests.get(f"{live.base_url}/v1/models", headers={"x-api-key": secret}, timeout=10),
        "/v1/chat bearer": requests.post(f"{live.base_url}/v1/chat/completions", headers=bearer, json=chat,
                                         timeout=10),
        "/v1/chat x-api-key": requests.post(f"{live.base_url}/v1/chat/completions", json=chat, timeout=10,
                                            headers={"x-api-key": secret}),
        "/api": requests.get(f"{live.base_url}/api/auth/me", headers=bearer, timeout=10),
        "/mcp": requests.post(f"{live.base_url}/mcp", json=MCP_INITIALIZE, timeout=10, headers={
            **bearer, "Accept": "application/json, text/event-stream"}),
        "/mcp/sse": requests.get(f"{live.base_url}/mcp/sse", headers=bearer, timeout=10, stream=True),
    }


@pytest.mark.parametrize("death", sorted(DEATHS))
def test_a_dead_key_is_refused_on_every_door_and_header_in_its_envelope(live, fake_openai, death):
    user = User(live)
    fields = {"scopes": ["v1", "mcp", "api"]}
    if death == "expired":
        fields["expires_at"] = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    key = make_key(user, **fields)
    user.key_id = key["id"]
    if death != "expired":
        fake_openai.script(Text("a"), Text("b"))
        alive = _doors(live, key["key"])
        for door, answer in alive.items():
            assert answer.status_code == 200, (door, answer.status_code, answer.text[:300])
            answer.close()
        DEATHS[death](live, user)
    else:
        poll(lambda: datetime.now(UTC) > datetime.fromisoformat(fields["expires_at"]), "the key's expiry")
    for door, answer in _doors(live, key["key"]).items():
        assert answer.status_code == 401, (door, answer.status_code, answer.text[:300])
        error = answer.json()["error"]
        if door.startswith("/v1"):
            assert error["type"] == "authentication_error" and error["code"] == "invalid_api_key", door
        else:
            assert error["code"] == "token_invalid" and set(error) == {"code", "message", "details", "request_id"}, door
        assert answer.headers["WWW-Authenticate"].startswith("Bearer"), door


@pytest.mark.parametrize("scope", ["v1", "mcp", "api"])
def test_a_key_out_of_its_scope_is_a_403_in_each_doors_envelope(live, fake_openai, scope):
    user = User(live)
    secret = make_key(user, scopes=[scope])["key"]
    fake_openai.script(Text("a"), Text("b"))
    for door, answer in _doors(live, secret).items():
        in_scope = door.split()[0].split("/")[1] if not door.startswith("/v1") else "v1"
        if in_scope == scope:
            assert answer.status_code == 200, (door, answer.text[:300])
            answer.close()
            continue
        assert answer.status_code == 403, (door, answer.status_code, answer.text[:300])
        error = answer.json()["error"]
        assert error["code"] == "key_scope" and f"'{in_scope}'" in error["message"], door
        assert error.get("type", "permission_error") == "permission_error", door


async def test_the_official_mcp_client_works_with_a_key_of_the_mcp_scope(live):
    import asyncio

    user = await asyncio.to_thread(User, live)
    secret = (await asyncio.to_thread(make_key, user, scopes=["mcp"]))["key"]
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {secret}"}) as http, \
            streamable_http_client(f"{live.base_url}/mcp", http_client=http) as (read, write, *_), \
            ClientSession(read, write) as session:
        await session.initialize()
        tools = await session.list_tools()
    assert "web_fetch" in {tool.name for tool in tools.tools}


def test_an_admins_key_without_the_admin_scope_is_refused_admin_operations(live):
    admin_token = live.login()["token"]
    admin = {"Authorization": f"Bearer {admin_token}"}
    plain = requests.post(f"{live.base_url}/api/keys", headers=admin, timeout=10,
                          json={"name": "plain", "scopes": ["api"]}).json()["key"]
    refused = requests.patch(f"{live.base_url}/api/config", json={"kb_enabled": True}, timeout=10,
                             headers={"Authorization": f"Bearer {plain}"})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    full = requests.post(f"{live.base_url}/api/keys", headers=admin, timeout=10,
                         json={"name": "full", "scopes": ["api", "admin"]}).json()["key"]
    assert requests.patch(f"{live.base_url}/api/config", json={"kb_enabled": True}, timeout=10,
                          headers={"Authorization": f"Bearer {full}"}).status_code == 200


def test_last_used_at_is_recorded(live):
    user = User(live)
    key = make_key(user)
    assert key["last_used_at"] is None
    before = datetime.now(UTC)
    assert requests.get(f"{live.base_url}/v1/models", headers={"x-api-key": key["key"]}, timeout=10).ok

    def used_at():
        rows = requests.get(f"{live.base_url}/api/keys", headers={"Authorization": f"Bearer {user.token}"},
                            timeout=10).json()["results"]
        return next(row["last_used_at"] for row in rows if row["id"] == key["id"])

    poll(lambda: used_at() is not None, "last_used_at written")
    assert datetime.fromisoformat(used_at()) >= before - timedelta(seconds=1)


def test_an_admins_key_without_the_admin_scope_gets_no_admin_tools_from_the_agent(live, fake_openai):
    admin = {"Authorization": f"Bearer {live.login()['token']}"}

    def tools_sent(scopes: list[str]) -> set[str]:
        secret = requests.post(f"{live.base_url}/api/keys", headers=admin, timeout=10,
                               json={"name": "tools", "scopes": scopes}).json()["key"]
        fake_openai.script(Text("ok"))
        answer = requests.post(f"{live.base_url}/v1/chat/completions", headers={"x-api-key": secret}, timeout=30,
                               json={"model": "agent", "messages": [{"role": "user", "content": "hi"}]})
        assert answer.status_code == 200, answer.text
        return {tool["function"]["name"] for tool in fake_openai.requests[-1].json().get("tools", [])}

    with_admin = tools_sent(["v1", "admin"])
    assert "computer_screenshot" in with_admin and "web_fetch" in with_admin
    without = tools_sent(["v1"])
    assert "computer_screenshot" not in without and "web_fetch" in without

"""The /a2a resource over real HTTP on loopback, against a served agentsite: an A2A client discovers the resource's
metadata, registers, is authorized (the user's consent on the dashboard's API), exchanges and refreshes its code
for a2a tokens, and finds them refused at /mcp (another audience)."""

from __future__ import annotations

import pytest
import requests

from tests.oauthflow import authorized_tokens, registered_client

pytestmark = pytest.mark.e2e


def _token(base: str, form: dict[str, str]) -> requests.Response:
    return requests.post(f"{base}/oauth/token", data=form, timeout=30)


def test_an_a2a_client_gets_a2a_tokens_that_mcp_refuses(live_server_proc):
    base = live_server_proc.base_url
    metadata = requests.get(f"{base}/.well-known/oauth-protected-resource/a2a", timeout=30).json()
    assert (metadata["resource"], metadata["scopes_supported"]) == (f"{base}/a2a", ["a2a"])
    client_id = registered_client(base, "a2a", "A2A client")
    user = {"Authorization": f"Bearer {live_server_proc.login()['token']}"}
    issued = authorized_tokens(base, client_id, metadata["resource"], user)
    assert issued["scope"] == "a2a"
    renewed = _token(base, {"grant_type": "refresh_token", "refresh_token": issued["refresh_token"],
                            "client_id": client_id})
    assert renewed.status_code == 200 and renewed.json()["scope"] == "a2a", renewed.text

    at_mcp = requests.post(f"{base}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=30, headers={
        "Authorization": f"Bearer {renewed.json()['access_token']}", "Accept": "application/json, text/event-stream"})
    assert at_mcp.status_code == 401, at_mcp.text
    assert 'error="invalid_token"' in at_mcp.headers["WWW-Authenticate"]
    assert "another resource" in at_mcp.json()["error"]["message"]
    apps = requests.get(f"{base}/api/oauth/apps", headers=user, timeout=30).json()["results"]
    assert [app["resources"] for app in apps if app["client_id"] == client_id] == [[f"{base}/a2a"]]

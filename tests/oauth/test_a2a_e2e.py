"""The /a2a resource over real HTTP on loopback, against a served agentsite: an A2A client discovers the resource's
metadata, registers, is authorized (the user's consent on the dashboard's API), exchanges and refreshes its code
for a2a tokens, and finds them refused at /mcp (another audience)."""

from __future__ import annotations

import base64
import hashlib
import secrets
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

pytestmark = pytest.mark.e2e

REDIRECT = "http://127.0.0.1:9/callback"


def _token(base: str, form: dict[str, str]) -> requests.Response:
    return requests.post(f"{base}/oauth/token", data=form, timeout=30)


def test_an_a2a_client_gets_a2a_tokens_that_mcp_refuses(live_server_proc):
    base = live_server_proc.base_url
    metadata = requests.get(f"{base}/.well-known/oauth-protected-resource/a2a", timeout=30).json()
    assert (metadata["resource"], metadata["scopes_supported"]) == (f"{base}/a2a", ["a2a"])
    registered = requests.post(f"{base}/oauth/register", json={
        "client_name": "A2A client", "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"], "scope": "a2a"}, timeout=30)
    assert registered.status_code == 201, registered.text
    client_id = registered.json()["client_id"]

    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    asked = requests.get(f"{base}/oauth/authorize", allow_redirects=False, timeout=30, params={
        "response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT, "code_challenge": challenge,
        "code_challenge_method": "S256", "resource": metadata["resource"], "state": "s1"})
    assert asked.status_code == 302 and "/#/consent/" in asked.headers["Location"], asked.text
    consent = asked.headers["Location"].rsplit("/", 1)[1]
    user = {"Authorization": f"Bearer {live_server_proc.login()['token']}"}
    shown = requests.get(f"{base}/api/oauth/consents/{consent}", headers=user, timeout=30).json()
    assert [item["name"] for item in shown["scope"]] == ["a2a"] and shown["resource"] == f"{base}/a2a"
    decided = requests.post(f"{base}/api/oauth/consents/{consent}", json={"allow": True}, headers=user, timeout=30)
    assert decided.status_code == 200, decided.text
    code = parse_qs(urlsplit(decided.json()["redirect_to"]).query)["code"][0]

    issued = _token(base, {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT,
                           "code_verifier": verifier, "client_id": client_id, "resource": f"{base}/a2a"})
    assert issued.status_code == 200, issued.text
    assert issued.json()["scope"] == "a2a"
    renewed = _token(base, {"grant_type": "refresh_token", "refresh_token": issued.json()["refresh_token"],
                            "client_id": client_id})
    assert renewed.status_code == 200 and renewed.json()["scope"] == "a2a", renewed.text

    at_mcp = requests.post(f"{base}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=30, headers={
        "Authorization": f"Bearer {renewed.json()['access_token']}", "Accept": "application/json, text/event-stream"})
    assert at_mcp.status_code == 401, at_mcp.text
    assert 'error="invalid_token"' in at_mcp.headers["WWW-Authenticate"]
    assert "another resource" in at_mcp.json()["error"]["message"]
    apps = requests.get(f"{base}/api/oauth/apps", headers=user, timeout=30).json()["results"]
    assert [app["resources"] for app in apps if app["client_id"] == client_id] == [[f"{base}/a2a"]]

"""An OAuth client's whole way to tokens against a served agentsite, over HTTP: register (RFC 7591), authorize
with PKCE and a resource indicator (RFC 8707), the user's consent through the dashboard's API, and the code's
exchange. Each step asserts its answer, so a test using it fails at the step that broke."""

from __future__ import annotations

import base64
import hashlib
import secrets
from typing import Any
from urllib.parse import parse_qs, urlsplit

import requests

REDIRECT = "http://127.0.0.1:9/callback"


def registered_client(base: str, scope: str, name: str = "test client") -> str:
    registered = requests.post(f"{base}/oauth/register", json={
        "client_name": name, "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"], "scope": scope}, timeout=30)
    assert registered.status_code == 201, registered.text
    return registered.json()["client_id"]


def authorized_tokens(base: str, client_id: str, resource: str, user: dict[str, str]) -> dict[str, Any]:
    """The token response for `client_id`, authorized for `resource` by the user whose headers are `user`."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    asked = requests.get(f"{base}/oauth/authorize", allow_redirects=False, timeout=30, params={
        "response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT, "code_challenge": challenge,
        "code_challenge_method": "S256", "resource": resource, "state": "s1"})
    assert asked.status_code == 302 and "/#/consent/" in asked.headers["Location"], asked.text
    consent = asked.headers["Location"].rsplit("/", 1)[1]
    decided = requests.post(f"{base}/api/oauth/consents/{consent}", json={"allow": True}, headers=user, timeout=30)
    assert decided.status_code == 200, decided.text
    code = parse_qs(urlsplit(decided.json()["redirect_to"]).query)["code"][0]
    issued = requests.post(f"{base}/oauth/token", timeout=30, data={
        "grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT, "code_verifier": verifier,
        "client_id": client_id, "resource": resource})
    assert issued.status_code == 200, issued.text
    return issued.json()

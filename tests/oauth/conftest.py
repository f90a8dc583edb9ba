"""The OAuth authorization server's steps as a connector takes them, through Django's test client (Host
`testserver`, so the resource is http://testserver/mcp): register, authorize, the user's consent on the
dashboard's API, the token exchange. Each helper returns the raw answer or the one value a test needs."""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from django.test import Client as HttpClient

from tests.conftest import client_for

ORIGIN = "http://testserver"
RESOURCE = f"{ORIGIN}/mcp"
REDIRECT = "http://127.0.0.1:33418/callback"


def challenge_of(verifier: str) -> str:
    """PKCE S256 (RFC 7636 §4.2)."""
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


@dataclass
class Connector:
    """A registered client, as the connector keeps it."""

    client_id: str
    secret: str | None = None
    method: str = "none"
    redirect_uri: str = REDIRECT
    verifier: str = field(default_factory=lambda: secrets.token_urlsafe(48))

    def auth(self, data: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
        """(form, headers) with this client's authentication at the token and revocation endpoints."""
        if self.method == "client_secret_basic":
            basic = base64.b64encode(f"{self.client_id}:{self.secret}".encode()).decode()
            return data, {"HTTP_AUTHORIZATION": f"Basic {basic}"}
        form = {**data, "client_id": self.client_id}
        if self.method == "client_secret_post":
            form["client_secret"] = self.secret or ""
        return form, {}


def register(http: HttpClient, **metadata: Any):
    """POST /oauth/register with a public loopback client's metadata, overridden by `metadata`."""
    body = {"client_name": "Test connector", "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"], **metadata}
    return http.post("/oauth/register", body, content_type="application/json")


def connector(http: HttpClient, **metadata: Any) -> Connector:
    response = register(http, **metadata)
    assert response.status_code == 201, response.content
    body = response.json()
    return Connector(body["client_id"], body.get("client_secret"), body["token_endpoint_auth_method"],
                     body["redirect_uris"][0])


def authorize_params(client: Connector, **overrides: Any) -> dict[str, Any]:
    """The query of a good authorization request; an override of None leaves the parameter out."""
    params = {"response_type": "code", "client_id": client.client_id, "redirect_uri": client.redirect_uri,
              "code_challenge": challenge_of(client.verifier), "code_challenge_method": "S256",
              "resource": RESOURCE, "scope": "mcp", "state": "state-123", **overrides}
    return {key: value for key, value in params.items() if value is not None}


def authorize(http: HttpClient, client: Connector, *, host: str = "testserver", **overrides: Any):
    query = urlencode(authorize_params(client, **overrides), doseq=True)
    return http.get(f"/oauth/authorize?{query}", HTTP_HOST=host)


def consent_id(response) -> str:
    assert response.status_code == 302, (response.status_code, response.content[:500])
    location = response["Location"]
    assert location.startswith("/#/consent/"), location
    return location.rsplit("/", 1)[1]


def redirected(location: str) -> dict[str, str]:
    """The query the client's redirect URI receives."""
    return {key: values[0] for key, values in parse_qs(urlsplit(location).query).items()}


def decide(user, consent: str, allow: bool = True, host: str = "testserver") -> dict[str, str]:
    response = client_for(user).post(f"/api/oauth/consents/{consent}", {"allow": allow}, format="json",
                                     HTTP_HOST=host)
    assert response.status_code == 200, response.content
    location = response.json()["redirect_to"]
    assert location.split("?")[0] == REDIRECT.split("?")[0] or location.startswith("https://"), location
    return redirected(location)


def code_for(http: HttpClient, client: Connector, user, *, host: str = "testserver", **overrides: Any) -> str:
    """A code: authorize, then the user allows."""
    query = decide(user, consent_id(authorize(http, client, host=host, **overrides)), host=host)
    assert query.get("state") == overrides.get("state", "state-123"), query
    return query["code"]


def exchange(http: HttpClient, client: Connector, code: str, *, host: str = "testserver", **overrides: Any):
    data = {"grant_type": "authorization_code", "code": code, "redirect_uri": client.redirect_uri,
            "code_verifier": client.verifier, "resource": f"http://{host}/mcp", **overrides}
    form, headers = client.auth({key: value for key, value in data.items() if value is not None})
    return http.post("/oauth/token", urlencode(form), content_type="application/x-www-form-urlencoded",
                     HTTP_HOST=host, **headers)


def refresh(http: HttpClient, client: Connector, refresh_token: str, **overrides: Any):
    data = {"grant_type": "refresh_token", "refresh_token": refresh_token, "resource": RESOURCE, **overrides}
    form, headers = client.auth({key: value for key, value in data.items() if value is not None})
    return http.post("/oauth/token", urlencode(form), content_type="application/x-www-form-urlencoded", **headers)


def revoke(http: HttpClient, client: Connector, token: str, **extra: str):
    form, headers = client.auth({"token": token, **extra})
    return http.post("/oauth/revoke", urlencode(form), content_type="application/x-www-form-urlencoded", **headers)


def tokens_for(http: HttpClient, client: Connector, user, **overrides: Any) -> dict[str, Any]:
    response = exchange(http, client, code_for(http, client, user), **overrides)
    assert response.status_code == 200, response.content
    return response.json()


def oauth_error(response, status: int, error: str) -> None:
    """The answer is OAuth's error shape with this status and error code."""
    assert response.status_code == status, (response.status_code, response.content[:500])
    body = response.json()
    assert body["error"] == error, body
    assert isinstance(body.get("error_description", ""), str)


@pytest.fixture
def http() -> HttpClient:
    return HttpClient()


@pytest.fixture
def public(http) -> Connector:
    return connector(http)

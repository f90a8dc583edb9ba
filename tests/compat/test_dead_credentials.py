"""A credential that a /v1 request presents and that does not stand is refused with a 401 in the door's own error
shape, in every `compat_auth` mode, never served as an anonymous caller: a logged-out token, a refresh token, an
`alg: none` token, a JWT-shaped garbage bearer, an OAuth access token (live or not: its audience is /mcp), each as
`Authorization: Bearer` and as `x-api-key`. A placeholder key (no credential's shape) from loopback is still
anonymous under `local`."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient
from rest_framework_simplejwt.tokens import RefreshToken

from accounts.authentication import key_digest
from accounts.tokens import PASSWORD_CLAIM, password_version, token_pair_for
from catalogue.services import config_update
from oauth.models import AccessToken, Client
from oauth.tokens import ACCESS_PREFIX, new_secret
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db(transaction=True)

DOORS = [
    ("get", "/v1/models", None),
    ("post", "/v1/chat/completions", {"model": "hash-256", "messages": [{"role": "user", "content": "hi"}]}),
    ("post", "/v1/responses", {"model": "hash-256", "input": "hi"}),
    ("post", "/v1/messages", {"model": "hash-256", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}),
    ("post", "/v1/messages/count_tokens", {"model": "hash-256", "messages": [{"role": "user", "content": "hi"}]}),
    ("post", "/v1/embeddings", {"model": "hash-256", "input": "hi"}),
]


def _unsigned(payload: dict) -> str:
    def part(data: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(payload)}."


@pytest.fixture
def dead_credentials(owner) -> dict[str, str]:
    login = APIClient().post("/api/auth/login", {"username": "owner", "password": PASSWORD}, format="json").json()
    out = APIClient()
    out.credentials(HTTP_AUTHORIZATION=f"Bearer {login['token']}")
    assert out.post("/api/auth/logout", {"refresh": login["refresh"]}, format="json").status_code == 204
    refresh = RefreshToken.for_user(owner)
    refresh[PASSWORD_CLAIM] = password_version(owner)
    valid = token_pair_for(owner)["token"]
    claims = json.loads(base64.urlsafe_b64decode(valid.split(".")[1] + "=="))
    return {"logged out": login["token"], "refresh token": str(refresh), "alg none": _unsigned(claims),
            "garbage": "eyJhbGciOiJIUzI1NiJ9.not-a-payload.not-a-signature", "oauth token": _oauth_token(owner),
            "oauth garbage": "asa-" + "x" * 43}


def _oauth_token(user) -> str:
    """A live OAuth access token of the user's, for /mcp (oauth.tokens)."""
    secret = new_secret(ACCESS_PREFIX)
    client = Client.objects.create(client_id="dead-credentials", name="an app", redirect_uris=["https://a.example/cb"],
                                   grant_types=["authorization_code"], response_types=["code"])
    AccessToken.objects.create(access_hash=key_digest(secret), client=client, user=user, family=uuid.uuid4(),
                               scope="mcp", resource="http://testserver/mcp", password_version=password_version(user),
                               expires_at=timezone.now() + timedelta(hours=1))
    return secret


def _call(method: str, path: str, body: dict | None, **headers: str):
    client = APIClient()
    if body is None:
        return getattr(client, method)(path, **headers)
    return getattr(client, method)(path, body, format="json", **headers)


def _assert_401_in_dialect(response, path: str, where: str) -> None:
    assert response.status_code == 401, f"{where}: {response.status_code} {response.content[:300]!r}"
    body = response.json()
    if path.startswith("/v1/messages"):
        assert body["type"] == "error" and body["error"]["type"] == "authentication_error", where
    else:
        assert body["error"]["code"] == "invalid_api_key" and body["error"]["type"], where
    assert response["WWW-Authenticate"].startswith("Bearer"), where


@pytest.mark.parametrize("mode", ["local", "public"])
def test_a_presented_dead_credential_is_a_401_on_every_door_in_its_dialect(dead_credentials, mode):
    config_update(changes={"compat_auth": mode})
    for kind, raw in dead_credentials.items():
        for header in ("HTTP_AUTHORIZATION", "HTTP_X_API_KEY"):
            value = f"Bearer {raw}" if header == "HTTP_AUTHORIZATION" else raw
            for method, path, body in DOORS:
                response = _call(method, path, body, **{header: value})
                _assert_401_in_dialect(response, path, f"{mode}: {method.upper()} {path} with {kind} in {header}")


def test_a_placeholder_key_or_none_from_loopback_is_still_served_under_local(dead_credentials):
    config_update(changes={"compat_auth": "local"})
    for headers in ({}, {"HTTP_AUTHORIZATION": "Bearer sk-placeholder"}, {"HTTP_X_API_KEY": "placeholder"}):
        assert _call("get", "/v1/models", None, **headers).status_code == 200, headers
        embedded = _call("post", "/v1/embeddings", {"model": "hash-256", "input": "hi"}, **headers)
        assert embedded.status_code == 200, (headers, embedded.content[:300])


def test_a_token_in_x_api_key_is_refused_even_a_valid_one(owner):
    # x-api-key carries API keys only (docs/api.md): a token there is a credential presented in the wrong place.
    config_update(changes={"compat_auth": "local"})
    token = token_pair_for(owner)["token"]
    _assert_401_in_dialect(_call("get", "/v1/models", None, HTTP_X_API_KEY=token), "/v1/models", "x-api-key")
    assert _call("get", "/v1/models", None, HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 200

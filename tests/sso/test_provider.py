"""sso.provider's ID token checks on tokens signed here (no provider process): the issuer as the discovery document
spells it, trailing slash included."""

from __future__ import annotations

import time

import pytest
from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey

from sso.provider import Provider, SsoFailure

CONFIG = {"ISSUER": "https://idp.example/application/o/agentsite", "CLIENT_ID": "agentsite", "CLIENT_SECRET": "s",
          "SCOPES": ["openid"], "DISCOVERY_TTL_S": 3600, "TIMEOUT_S": 1}


def provider_with(issuer_in_discovery: str, key: RSAKey) -> Provider:
    """A Provider whose discovery document and key set are already kept (as after a first fetch)."""
    provider = Provider(CONFIG)
    provider._kept.metadata = {"issuer": issuer_in_discovery, "jwks_uri": "https://idp.example/jwks",
                               "authorization_endpoint": "https://idp.example/auth",
                               "token_endpoint": "https://idp.example/token"}
    provider._kept.metadata_at = provider._kept.keys_at = time.monotonic()
    provider._kept.keys = KeySet([key]).as_dict(private=False)
    return provider


def id_token(key: RSAKey, iss: str) -> str:
    now = int(time.time())
    claims = {"iss": iss, "sub": "s1", "aud": "agentsite", "iat": now, "exp": now + 300, "nonce": "n1"}
    return jwt.encode({"alg": "RS256", "kid": "k1"}, claims, key)


@pytest.fixture(scope="module")
def key() -> RSAKey:
    return RSAKey.generate_key(2048, parameters={"kid": "k1"})


def test_an_issuer_with_a_trailing_slash_is_accepted_as_discovery_spells_it(key):
    provider = provider_with(CONFIG["ISSUER"] + "/", key)
    claims = provider.id_claims(id_token(key, CONFIG["ISSUER"] + "/"), nonce="n1")
    assert claims["sub"] == "s1"


@pytest.mark.parametrize("discovery, token", [(CONFIG["ISSUER"] + "/", CONFIG["ISSUER"]),
                                              (CONFIG["ISSUER"], CONFIG["ISSUER"] + "/")])
def test_the_issuer_must_match_discovery_exactly(key, discovery, token):
    with pytest.raises(SsoFailure) as failure:
        provider_with(discovery, key).id_claims(id_token(key, token), nonce="n1")
    assert failure.value.reason == "wrong_issuer"

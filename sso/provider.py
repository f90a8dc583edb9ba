"""The relying party's half of OpenID Connect, done by Authlib (the OAuth client, the ID token's claims) and joserfc
(the JWS signature): discovery, the authorization URL (code flow, PKCE S256, state, nonce), the code exchange,
the ID token's checks, userinfo, and the provider's sign-out URL. No database and no request here.

Contract: every failure raises SsoFailure(reason, message); `reason` is one of REASONS, the word the callback's
page and the audit event `auth.sso_failed` carry. Messages name what failed, never a token or a secret.
Discovery and the key set are kept per process for OIDC DISCOVERY_TTL_S; an ID token signed with a key id the
kept set lacks fetches the set again, once, before it is refused (the provider rotated its keys).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import requests
from authlib.integrations.requests_client import OAuth2Session, OAuthError
from authlib.oidc.core import CodeIDToken
from django.conf import settings
from joserfc import errors as jose_errors
from joserfc import jwt
from joserfc.jwk import KeySet

ALGORITHMS = ("RS256", "ES256")
LEEWAY_S = 60

# reason -> what the page says happened (the details follow it).
REASONS = {
    "not_configured": "Single sign-on is not configured on this server.",
    "rate_limited": "Too many sign-ins were started from your address.",
    "provider_unreachable": "The identity provider could not be reached.",
    "provider_invalid": "The identity provider's configuration could not be used.",
    "provider_error": "The identity provider refused the sign-in.",
    "state_invalid": "The sign-in link is unknown, already used or expired.",
    "browser_mismatch": "The sign-in was started in another browser.",
    "code_rejected": "The identity provider refused the authorization code (expired or already used).",
    "bad_signature": "The ID token's signature is not valid.",
    "unknown_key": "The ID token is signed with a key the identity provider does not publish.",
    "wrong_algorithm": "The ID token is signed with an algorithm that is not accepted.",
    "wrong_issuer": "The ID token was issued by another provider.",
    "wrong_audience": "The ID token was issued for another application.",
    "expired": "The ID token has expired.",
    "not_yet_valid": "The ID token is not valid yet (issued in the future).",
    "nonce_mismatch": "The ID token does not answer this sign-in (nonce).",
    "invalid_token": "The ID token could not be read.",
    "missing_claim": "The identity provider did not send a claim this server needs.",
    "not_allowed": "Your account is not in a group allowed to use this server.",
    "deactivated": "Your account on this server is deactivated.",
    "no_account": "There is no account for you on this server, and new accounts are not made at sign-in.",
    "account_conflict": "Your sign-in could not be linked to one account.",
}


class SsoFailure(Exception):
    def __init__(self, reason: str, detail: str = "", status: int = 400, *, retry_after: int | None = None):
        if reason not in REASONS:
            raise ValueError(f"unknown single sign-on failure {reason!r}")
        self.reason, self.detail, self.status, self.retry_after = reason, detail, status, retry_after
        super().__init__(f"{reason}: {detail}" if detail else reason)

    @property
    def message(self) -> str:
        return REASONS[self.reason] + (f" {self.detail}" if self.detail else "")


@dataclass
class _Kept:
    metadata: dict[str, Any] | None = None
    metadata_at: float = 0.0
    keys: dict[str, Any] | None = None
    keys_at: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)


class Provider:
    """One OpenID provider as the settings' OIDC dict describes it (ISSUER, CLIENT_ID, CLIENT_SECRET, SCOPES,
    DISCOVERY_TTL_S, TIMEOUT_S). Thread-safe; meant to be kept for the process (`provider()`)."""

    def __init__(self, config: dict[str, Any]):
        self.issuer: str = config["ISSUER"]
        self.client_id: str = config["CLIENT_ID"]
        self.client_secret: str = config.get("CLIENT_SECRET") or ""
        self.scopes: list[str] = list(config.get("SCOPES") or ["openid"])
        if "openid" not in self.scopes:
            self.scopes.insert(0, "openid")
        self.ttl = float(config.get("DISCOVERY_TTL_S", 3600))
        self.timeout = float(config.get("TIMEOUT_S", 10.0))
        self._kept = _Kept()

    # --- discovery -----------------------------------------------------------------------------------------

    def _get_json(self, url: str, what: str, *, token: str = "", refused: str = "provider_unreachable"
                  ) -> dict[str, Any]:
        """GET a JSON object from the provider (with the bearer `token` when given); an answer other than 200 is
        the failure `refused`."""
        headers = {"Accept": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
        try:
            response = requests.get(url, timeout=self.timeout, headers=headers)
        except requests.RequestException as exc:
            raise SsoFailure("provider_unreachable", f"Fetching its {what} failed ({type(exc).__name__}).",
                             502) from exc
        if response.status_code != 200:
            raise SsoFailure(refused, f"Its {what} answered HTTP {response.status_code}.", 502)
        try:
            body = response.json()
        except ValueError as exc:
            raise SsoFailure("provider_invalid", f"Its {what} is not JSON.", 502) from exc
        if not isinstance(body, dict):
            raise SsoFailure("provider_invalid", f"Its {what} is not a JSON object.", 502)
        return body

    def metadata(self, *, fresh: bool = False) -> dict[str, Any]:
        """The discovery document (<issuer>/.well-known/openid-configuration), checked: its `issuer` is the
        configured one and it names the endpoints the code flow needs."""
        kept = self._kept
        with kept.lock:
            if not fresh and kept.metadata is not None and time.monotonic() - kept.metadata_at < self.ttl:
                return kept.metadata
        document = self._get_json(f"{self.issuer}/.well-known/openid-configuration", "discovery document")
        if str(document.get("issuer", "")).rstrip("/") != self.issuer:
            raise SsoFailure("provider_invalid", "Its discovery document names another issuer "
                             f"({str(document.get('issuer'))[:200]!r}; AGENTSITE_OIDC_ISSUER is {self.issuer!r}).",
                             502)
        missing = [name for name in ("authorization_endpoint", "token_endpoint", "jwks_uri")
                   if not isinstance(document.get(name), str)]
        if missing:
            raise SsoFailure("provider_invalid", f"Its discovery document lacks {', '.join(missing)}.", 502)
        with kept.lock:
            kept.metadata, kept.metadata_at = document, time.monotonic()
        return document

    def _key_set(self, *, fresh: bool) -> KeySet:
        kept = self._kept
        with kept.lock:
            keys = kept.keys if kept.keys is not None and time.monotonic() - kept.keys_at < self.ttl else None
        if keys is None or fresh:
            keys = self._get_json(self.metadata()["jwks_uri"], "key set (jwks_uri)")
            with kept.lock:
                kept.keys, kept.keys_at = keys, time.monotonic()
        try:
            return KeySet.import_key_set(keys)  # type: ignore[arg-type]
        except (ValueError, TypeError, KeyError, jose_errors.JoseError) as exc:
            raise SsoFailure("provider_invalid", "Its key set could not be read.", 502) from exc

    # --- the code flow -------------------------------------------------------------------------------------

    def _session(self, redirect_uri: str) -> OAuth2Session:
        metadata = self.metadata()
        supported = metadata.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
        if not self.client_secret:
            method = "none"
        elif "client_secret_basic" in supported:
            method = "client_secret_basic"
        else:
            method = "client_secret_post"
        return OAuth2Session(client_id=self.client_id, client_secret=self.client_secret or None,
                             token_endpoint_auth_method=method, scope=" ".join(self.scopes),
                             redirect_uri=redirect_uri, code_challenge_method="S256", default_timeout=self.timeout)

    def authorization_url(self, *, redirect_uri: str, state: str, nonce: str, code_verifier: str) -> str:
        with self._session(redirect_uri) as session:
            url, _ = session.create_authorization_url(self.metadata()["authorization_endpoint"], state=state,
                                                      code_verifier=code_verifier, nonce=nonce)
        return url

    def exchange(self, *, code: str, redirect_uri: str, code_verifier: str) -> dict[str, Any]:
        """The token endpoint's answer to the authorization code; it must hold an ID token."""
        with self._session(redirect_uri) as session:
            try:
                token = session.fetch_token(self.metadata()["token_endpoint"], grant_type="authorization_code",
                                            code=code, code_verifier=code_verifier)
            except OAuthError as exc:
                raise SsoFailure("code_rejected", f"Its token endpoint answered {exc.error!r}.") from exc
            except requests.RequestException as exc:
                raise SsoFailure("provider_unreachable", f"Its token endpoint failed ({type(exc).__name__}).",
                                 502) from exc
            except ValueError as exc:  # a body that is not the token JSON
                raise SsoFailure("provider_invalid", "Its token endpoint's answer could not be read.", 502) from exc
        if not isinstance(token, dict) or not isinstance(token.get("id_token"), str):
            raise SsoFailure("missing_claim", "The token endpoint sent no ID token (is `openid` among the scopes?).")
        return dict(token)

    def id_claims(self, id_token: str, *, nonce: str, access_token: str | None = None) -> dict[str, Any]:
        """The ID token's claims, once its signature (RS256 or ES256, a key of jwks_uri), `iss`, `aud`, `azp`
        (when present), `exp`/`iat` (LEEWAY_S), `nonce` and `at_hash` (when present) hold."""
        try:
            try:
                decoded = jwt.decode(id_token, self._key_set(fresh=False), algorithms=list(ALGORITHMS))
            except jose_errors.InvalidKeyIdError:
                decoded = jwt.decode(id_token, self._key_set(fresh=True), algorithms=list(ALGORITHMS))
        except jose_errors.InvalidKeyIdError as exc:
            raise SsoFailure("unknown_key") from exc
        except jose_errors.BadSignatureError as exc:
            raise SsoFailure("bad_signature") from exc
        except (jose_errors.UnsupportedAlgorithmError, jose_errors.MissingAlgorithmError) as exc:
            raise SsoFailure("wrong_algorithm", f"Accepted: {', '.join(ALGORITHMS)}.") from exc
        except (jose_errors.JoseError, ValueError, TypeError) as exc:
            raise SsoFailure("invalid_token", type(exc).__name__) from exc
        params: dict[str, Any] = {"nonce": nonce, "client_id": self.client_id}
        if access_token:
            params["access_token"] = access_token
        # `iss` as the discovery document spells it: metadata() holds it equal to the configured issuer up to a
        # trailing slash, which some providers keep (authentik) and the settings drop.
        options = {"iss": {"essential": True, "value": str(self.metadata()["issuer"])},
                   "aud": {"essential": True, "value": self.client_id}}
        claims = CodeIDToken(decoded.claims, decoded.header, options, params)
        try:
            claims.validate(leeway=LEEWAY_S)
        except jose_errors.ExpiredTokenError as exc:
            raise SsoFailure("expired") from exc
        except jose_errors.MissingClaimError as exc:
            if exc.claim == "nonce":  # the nonce binds the token to this sign-in: without one, it answers none
                raise SsoFailure("nonce_mismatch", "The ID token carries no nonce.") from exc
            raise SsoFailure("missing_claim", f"The ID token lacks {exc.claim}.") from exc
        except jose_errors.InvalidClaimError as exc:
            raise _claim_failure(exc) from exc
        except jose_errors.JoseError as exc:
            raise SsoFailure("invalid_token", type(exc).__name__) from exc
        if not claims.get("nonce"):
            raise SsoFailure("nonce_mismatch", "The ID token carries no nonce.")
        return dict(claims)

    def userinfo(self, access_token: str) -> dict[str, Any]:
        """The userinfo endpoint's claims ({} when the provider has none)."""
        url = self.metadata().get("userinfo_endpoint")
        if not isinstance(url, str) or not access_token:
            return {}
        # A signed (JWT) userinfo answer is not JSON: provider_invalid.
        return self._get_json(url, "userinfo endpoint", token=access_token, refused="provider_error")

    def end_session_url(self, *, id_token: str, post_logout_redirect_uri: str) -> str | None:
        """The provider's end_session_endpoint with id_token_hint and post_logout_redirect_uri (None without one,
        or when the provider cannot be reached: signing out here never waits on it)."""
        try:
            endpoint = self.metadata().get("end_session_endpoint")
        except SsoFailure:
            return None
        if not isinstance(endpoint, str) or not endpoint:
            return None
        query = urlencode({"id_token_hint": id_token, "post_logout_redirect_uri": post_logout_redirect_uri,
                           "client_id": self.client_id})
        return f"{endpoint}{'&' if '?' in endpoint else '?'}{query}"


def _claim_failure(exc: jose_errors.InvalidClaimError) -> SsoFailure:
    claim = getattr(exc, "claim", "") or str(exc.description or "")
    if "iss" == claim:
        return SsoFailure("wrong_issuer")
    if claim in ("aud", "azp"):
        return SsoFailure("wrong_audience", f"(claim {claim})")
    if claim in ("iat", "nbf"):
        return SsoFailure("not_yet_valid")
    if claim == "nonce":
        return SsoFailure("nonce_mismatch")
    return SsoFailure("invalid_token", f"The claim {claim or '?'} is not valid.")


_provider: list[Provider | None] = [None]
_provider_lock = threading.Lock()


def configured() -> bool:
    return bool(settings.OIDC["ISSUER"] and settings.OIDC["CLIENT_ID"])


def provider() -> Provider:
    """The configured provider, kept for the process (a change of settings, in tests, makes a new one)."""
    if not configured():
        raise SsoFailure("not_configured", "Set AGENTSITE_OIDC_ISSUER and AGENTSITE_OIDC_CLIENT_ID.", 404)
    with _provider_lock:
        current = _provider[0]
        config = settings.OIDC
        if current is None or (current.issuer, current.client_id, current.client_secret, current.scopes) != (
                config["ISSUER"], config["CLIENT_ID"], config.get("CLIENT_SECRET") or "",
                list(config["SCOPES"]) if "openid" in config["SCOPES"] else ["openid", *config["SCOPES"]]):
            current = _provider[0] = Provider(config)
        return current

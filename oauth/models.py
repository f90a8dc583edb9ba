"""The authorization server's rows: the clients that registered, the consents under way, the codes, the tokens.
Invariants (oauth.server and oauth.tokens keep them):
- no secret is stored: a client secret, a code, an access token and a refresh token are kept as their SHA-256
  (`*_hash`), and shown once, in the answer that makes them;
- a `ConsentRequest` is made by GET /oauth/authorize once the request checked out (client, redirect URI, PKCE,
  resource), and used at most once, by the signed-in user's decision, within CONSENT_TTL;
- an `AuthorizationCode` is used at most once, within CODE_TTL, by the client it was issued to, with the
  redirect URI and the PKCE verifier of its request; a second use revokes every token made from it;
- an `AccessToken` row is one access token and its refresh token. Its `family` is the authorization it came from:
  a refresh makes a new row in the family and marks the old one `rotated_at`; presenting a rotated refresh token
  again revokes the whole family (reuse detection). A token stands while unrevoked, unexpired, its user active,
  on the password it was issued under, and only for its `resource` (the audience).
"""

from __future__ import annotations

import hashlib
import hmac
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

CONSENT_TTL = timedelta(minutes=10)
CODE_TTL = timedelta(minutes=1)
ACCESS_TTL = timedelta(hours=1)
REFRESH_TTL = timedelta(days=30)
SCOPE = "mcp"  # /mcp's scope, the default of a client row (oauth.resource lists every resource and its scope)


class Client(models.Model):
    """A client that registered itself (RFC 7591): a connector (Claude, ChatGPT, VS Code, the MCP Inspector, ...).

    Public clients (`auth_method` `none`) prove themselves with PKCE only; a confidential one also with the
    secret it was given at registration (`secret_hash`). Authlib's client contract (`ClientMixin`) is
    implemented by oauth.server.ClientAdapter over this row.
    """

    client_id = models.CharField(max_length=64, unique=True)
    secret_hash = models.CharField(max_length=64, blank=True, default="")
    name = models.CharField(max_length=200)
    redirect_uris = models.JSONField(default=list)
    auth_method = models.CharField(max_length=32, default="none")
    grant_types = models.JSONField(default=list)
    response_types = models.JSONField(default=list)
    scope = models.CharField(max_length=200, default=SCOPE)
    # The rest of the registration as given (client_uri, logo_uri, software_id, ...): shown, never trusted.
    metadata = models.JSONField(default=dict, blank=True)
    registered_from = models.CharField(max_length=64, blank=True, default="", help_text="The client address.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "OAuth client"

    def __str__(self) -> str:
        return f"{self.name} ({self.client_id})"

    # Authlib's client contract (authlib.oauth2.rfc6749.ClientMixin).

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str | None:
        return self.redirect_uris[0] if len(self.redirect_uris) == 1 else None

    def get_allowed_scope(self, scope: str | None) -> str:
        """The requested scopes this client may have (the server's one scope when none is asked)."""
        if not scope:
            return self.scope
        allowed = set(self.scope.split())
        return " ".join(part for part in scope.split() if part in allowed)

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.redirect_uris  # exact string match (OAuth 2.1)

    def check_client_secret(self, client_secret: str) -> bool:
        digest = hashlib.sha256(client_secret.encode("utf-8", "surrogatepass")).hexdigest()
        return bool(self.secret_hash) and hmac.compare_digest(self.secret_hash, digest)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method == self.auth_method

    def check_response_type(self, response_type: str) -> bool:
        return response_type in self.response_types

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in self.grant_types


class ConsentRequest(models.Model):
    """An authorization request waiting for the user's decision on the dashboard's consent page."""

    id = models.CharField(max_length=64, primary_key=True)
    client = models.ForeignKey(Client, on_delete=models.CASCADE, related_name="+")
    params = models.JSONField(help_text="The authorization request's parameters, as checked.")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        verbose_name = "OAuth consent request"

    def __str__(self) -> str:
        return f"consent for {self.client_id}"

    def is_expired(self) -> bool:
        return self.expires_at <= timezone.now()


class AuthorizationCode(models.Model):
    """An authorization code, by its SHA-256, bound to its client, user, redirect URI, PKCE challenge and resource."""

    code_hash = models.CharField(max_length=64, unique=True)
    client = models.ForeignKey(Client, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    redirect_uri = models.CharField(max_length=2000)
    scope = models.CharField(max_length=200)
    resource = models.CharField(max_length=2000)
    code_challenge = models.CharField(max_length=128)
    code_challenge_method = models.CharField(max_length=10)
    family = models.UUIDField(default=uuid.uuid4, help_text="The tokens made from this code share it.")
    # accounts.tokens.password_version of the user at consent: a password change before the exchange voids it.
    password_version = models.CharField(max_length=64, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "OAuth authorization code"

    def __str__(self) -> str:
        return f"code for {self.client_id} (user {self.user_id})"

    # Authlib's code contract (authlib.oauth2.rfc6749.AuthorizationCodeMixin).

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope

    def is_expired(self) -> bool:
        return self.expires_at <= timezone.now()


class AccessToken(models.Model):
    """An access token and its refresh token (see the module's invariants)."""

    access_hash = models.CharField(max_length=64, unique=True)
    refresh_hash = models.CharField(max_length=64, unique=True, null=True, blank=True)
    client = models.ForeignKey(Client, on_delete=models.CASCADE, related_name="tokens")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oauth_tokens")
    family = models.UUIDField(db_index=True)
    scope = models.CharField(max_length=200)
    resource = models.CharField(max_length=2000)
    # accounts.tokens.password_version of the user at issue: a password change ends the token.
    password_version = models.CharField(max_length=64, default="")
    issued_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    refresh_expires_at = models.DateTimeField(null=True, blank=True)
    rotated_at = models.DateTimeField(null=True, blank=True, help_text="When its refresh token was used.")
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "OAuth access token"
        indexes = [models.Index(fields=["user", "client"], name="oauth_token_user_client"),
                   # oauth.trim finds the rows past their time by it.
                   models.Index(fields=["refresh_expires_at", "expires_at"], name="oauth_token_expiry")]

    def __str__(self) -> str:
        return f"token for {self.client_id} (user {self.user_id})"

    # Authlib's token contract (authlib.oauth2.rfc6749.TokenMixin), for a refresh or a revocation.

    def check_client(self, client: Client) -> bool:
        return self.client_id == client.pk

    def get_scope(self) -> str:
        return self.scope

    def get_expires_in(self) -> int:
        return int(ACCESS_TTL.total_seconds())

    def is_expired(self) -> bool:
        return self.expires_at <= timezone.now()

    def is_revoked(self) -> bool:
        return self.revoked_at is not None

"""The authorization server's protocol, on Authlib: authorization codes with PKCE (S256, required of every client)
and RFC 8707 resource indicators, refresh tokens with rotation and reuse detection, revocation (RFC 7009) and
dynamic client registration (RFC 7591). Authlib checks the protocol; this module stores what it issues (hashed:
oauth.models) and adds the required PKCE and the `resource` (/mcp or /a2a, each with its own scope only).

Contract of `server` (one per process; every row in the database, so each step may land on any process):
- `server.get_consent_grant(request)` checks an authorization request (raises OAuth2Error, `redirect_uri` set
  when the client may be told);
- `consent_decide(consent, user)` turns a consent into the redirect the browser follows (a code or an error);
- `server.create_token_response(request)` and `server.create_endpoint_response("revocation", request)` answer
  the token and revocation endpoints (registration: oauth.views).
A code or refresh token is used (a conditional UPDATE: never by two processes) once its request checked out.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any
from urllib.parse import quote

from authlib.common.urls import add_params_to_uri
from authlib.integrations.django_oauth2 import AuthorizationServer
from authlib.integrations.django_oauth2.requests import DjangoOAuth2Payload, DjangoOAuth2Request
from authlib.oauth2 import OAuth2Error
from authlib.oauth2.rfc6749 import InvalidGrantError, InvalidRequestError, OAuth2Request, grants
from authlib.oauth2.rfc6749.errors import InvalidScopeError
from authlib.oauth2.rfc7009 import RevocationEndpoint
from authlib.oauth2.rfc7636 import CodeChallenge
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.http import HttpRequest
from django.utils import timezone

from accounts.authentication import key_digest
from accounts.tokens import password_version
from agentsite.core.audit import audit
from agentsite.core.errors import AppError
from oauth.models import (
    ACCESS_TTL,
    CODE_TTL,
    CONSENT_TTL,
    REFRESH_TTL,
    AccessToken,
    AuthorizationCode,
    Client,
    ConsentRequest,
)
from oauth.resource import SCOPES, ProtectedResource, origin_of, resource_canonical, resource_named
from oauth.tokens import ACCESS_PREFIX, CODE_PREFIX, REFRESH_PREFIX, new_secret
from oauth.trim import expired_rows_trim

logger = logging.getLogger(__name__)


# The authorization request's parameters a consent keeps (and checks again at the decision); others are ignored.
CONSENT_PARAMS = ("response_type", "client_id", "redirect_uri", "scope", "state", "code_challenge",
                  "code_challenge_method", "resource")


class InvalidTargetError(OAuth2Error):
    """RFC 8707: the `resource` is missing, or names no resource this server protects."""

    error = "invalid_target"


class _Request(DjangoOAuth2Request):
    """A Django request for Authlib. Authlib refuses plain http but on loopback; serving TLS is the deployment's
    (its proxy's) job, and a LAN install on http must work, so the scheme is not judged here."""

    def __init__(self, request: HttpRequest):
        uri = request.build_absolute_uri()
        OAuth2Request.__init__(self, request.method or "GET", "https://" + uri.split("://", 1)[-1],
                               headers=request.headers)
        self.uri = uri
        self.payload = DjangoOAuth2Payload(request)
        self._request = request


class Server(AuthorizationServer):
    """Authlib's Django authorization server, storing tokens hashed (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__(Client, AccessToken)
        self.scopes_supported = list(SCOPES)

    def create_oauth2_request(self, request: Any) -> OAuth2Request:
        return request if isinstance(request, OAuth2Request) else _Request(request)

    def query_client(self, client_id: str) -> Client | None:
        # A NUL is in no client id, and PostgreSQL refuses it in a query (a 500).
        if not isinstance(client_id, str) or "\x00" in client_id:
            return None
        return Client.objects.filter(client_id=client_id).first()

    def generate_token(self, grant_type, client, user=None, scope=None, expires_in=None,
                       include_refresh_token=True):
        token = {"token_type": "Bearer", "access_token": new_secret(ACCESS_PREFIX),
                 "expires_in": int(ACCESS_TTL.total_seconds())}
        if include_refresh_token:
            token["refresh_token"] = new_secret(REFRESH_PREFIX)
        if scope:
            token["scope"] = scope
        return token

    def save_token(self, token: dict, request: OAuth2Request) -> AccessToken:
        """Store a token made for a code or a refresh: hashed, bound to the grant's family and resource."""
        origin = request.authorization_code or request.refresh_token
        now = timezone.now()
        return AccessToken.objects.create(
            access_hash=key_digest(token["access_token"]),
            refresh_hash=key_digest(token["refresh_token"]) if token.get("refresh_token") else None,
            client=request.client, user=request.user, family=origin.family, scope=token.get("scope") or origin.scope,
            resource=origin.resource, password_version=password_version(request.user),
            expires_at=now + ACCESS_TTL,
            refresh_expires_at=(now + REFRESH_TTL) if token.get("refresh_token") else None)


def _resource_of(request: OAuth2Request) -> list[str]:
    return [value for value in request.payload.datalist.get("resource", []) if value]


def _same_resource(request: OAuth2Request, row: AuthorizationCode | AccessToken) -> bool:
    """Whether a token request's resource, if it names one, is the one its code or grant was issued for
    (compared canonically: oauth.resource)."""
    requested = _resource_of(request)
    return not requested or [resource_canonical(value) for value in requested] == [row.resource]


def _scope_for(resource: ProtectedResource, requested: str | None, client: Client) -> str:
    """The scope an authorization request for `resource` is granted: the resource's own, whether asked for or
    not. Asking for another (or for more) is invalid_scope, as is a resource whose scope the client did not
    register for."""
    if requested and set(requested.split()) != {resource.scope}:
        raise InvalidScopeError(f"The resource {resource.path} takes the scope '{resource.scope}' only; ask for "
                                f"one resource and its scope per authorization.")
    if resource.scope not in client.scope.split():
        raise InvalidScopeError(f"This client did not register for the scope '{resource.scope}'; register again "
                                f"with it.")
    return resource.scope


class AuthorizationCodeGrant(grants.AuthorizationCodeGrant):
    """The code flow: PKCE S256 and one `resource` (/mcp's or /a2a's URL) required on every authorization request;
    the scope is the resource's (`_scope_for`)."""

    TOKEN_ENDPOINT_AUTH_METHODS = ["none", "client_secret_post", "client_secret_basic"]

    def validate_authorization_request(self) -> str:
        redirect_uri = super().validate_authorization_request()
        payload = self.request.payload
        try:
            if any("\x00" in str(payload.data.get(name) or "") for name in CONSENT_PARAMS):
                raise InvalidRequestError("A parameter holds a NUL character.")
            if not payload.data.get("code_challenge"):
                raise InvalidRequestError("PKCE is required: send code_challenge and code_challenge_method=S256.")
            if payload.data.get("code_challenge_method") != "S256":
                raise InvalidRequestError("code_challenge_method must be S256.")
            resources = _resource_of(self.request)
            if len(resources) != 1:
                raise InvalidTargetError("Send exactly one resource: this server's MCP or A2A URL (RFC 8707).")
            resource = resource_named(resources[0], self.request.uri)
            if resource is None:
                raise InvalidTargetError(f"The resource {resources[0]!r} is neither this server's MCP endpoint nor "
                                         f"its A2A endpoint.")
            self.request.scope = _scope_for(resource, payload.data.get("scope"), self.request.client)
        except OAuth2Error as error:
            error.redirect_uri = redirect_uri
            raise
        return redirect_uri

    def save_authorization_code(self, code: str, request: OAuth2Request) -> AuthorizationCode:
        payload = request.payload.data
        return AuthorizationCode.objects.create(
            code_hash=key_digest(code), client=request.client, user=request.user,
            redirect_uri=payload.get("redirect_uri") or request.client.get_default_redirect_uri(),
            scope=request.scope, resource=resource_canonical(_resource_of(request)[0]),
            code_challenge=payload["code_challenge"], code_challenge_method=payload["code_challenge_method"],
            password_version=password_version(request.user), expires_at=timezone.now() + CODE_TTL)

    def generate_authorization_code(self) -> str:
        return new_secret(CODE_PREFIX)

    def query_authorization_code(self, code: str, client: Client) -> AuthorizationCode | None:
        """The code, if this client's, unused and within its time. A used one presented again revokes what was
        made from it. It is claimed only once the whole request checked out (authenticate_user), so a request
        that fails (a wrong verifier, redirect URI or resource) leaves it to the client that holds the right
        ones within its minute."""
        row = AuthorizationCode.objects.filter(code_hash=key_digest(code), client=client).first()
        if row is None:
            return None
        if row.used_at is not None:
            _code_replayed(row)
            return None
        if row.is_expired():
            return None
        if not _same_resource(self.request, row):
            raise InvalidTargetError("The resource differs from the one the code was issued for.")
        return row

    def delete_authorization_code(self, authorization_code: AuthorizationCode) -> None:
        """Kept (claimed) until oauth.trim removes it: a replay must find it to revoke what it made."""

    def authenticate_user(self, authorization_code: AuthorizationCode) -> Any:
        """The user who consented, once the code is claimed for this exchange (the request checked out, PKCE
        included: Authlib verifies it before it asks for the user)."""
        user = get_user_model().objects.filter(pk=authorization_code.user_id, is_active=True).first()
        if user is None:
            raise InvalidGrantError("The user who consented is gone or deactivated.")
        if password_version(user) != authorization_code.password_version:
            raise InvalidGrantError("The user who consented changed their password since: authorize again.")
        claimed = AuthorizationCode.objects.filter(pk=authorization_code.pk, used_at__isnull=True).update(
            used_at=timezone.now())
        if not claimed:  # another exchange of the same code won the race: a replay
            _code_replayed(authorization_code)
            raise InvalidGrantError("The code was used already.")
        return user


def _code_replayed(row: AuthorizationCode) -> None:
    logger.warning("An authorization code of client %s was presented again: its tokens are revoked", row.client_id)
    _reused(row, "authorization_code", tokens_revoke(AccessToken.objects.filter(family=row.family)))


def _reused(row: AuthorizationCode | AccessToken, grant: str, ended: int) -> None:
    """Audit a code or refresh token presented again (reuse detection): its grant was revoked."""
    audit("oauth.token_reuse", outcome="refused", door="oauth", target=f"oauth_client:{row.client.client_id}",
          details={"user_id": row.user_id, "grant": grant, "ended": ended})


class RefreshTokenGrant(grants.RefreshTokenGrant):
    """Refresh with rotation: each refresh token is used once; presenting a used one revokes its family."""

    TOKEN_ENDPOINT_AUTH_METHODS = ["none", "client_secret_post", "client_secret_basic"]
    INCLUDE_NEW_REFRESH_TOKEN = True

    def authenticate_refresh_token(self, refresh_token: str) -> AccessToken | None:
        """The grant's current token, if the refresh token is the client's, unused, unrevoked and within its
        time. One used already (rotated) revokes its whole family. Another client's is not touched: it stays
        its owner's. Claimed only once the request checked out (authenticate_user)."""
        row = AccessToken.objects.filter(refresh_hash=key_digest(refresh_token), client=self.request.client).first()
        if row is None:
            return None
        if row.rotated_at is not None:  # (a rotated row is revoked too: this comes first)
            _refresh_replayed(row)
            return None
        if row.revoked_at is not None:
            return None
        if row.refresh_expires_at is None or row.refresh_expires_at <= timezone.now():
            return None
        if not _same_resource(self.request, row):
            raise InvalidTargetError("The resource differs from the one the grant was issued for.")
        return row

    def authenticate_user(self, refresh_token: AccessToken) -> Any:
        """The grant's user while it stands (active, on the password the grant began under; else the grant
        ends), once the refresh token is claimed for this refresh."""
        user = get_user_model().objects.filter(pk=refresh_token.user_id, is_active=True).first()
        if user is None or password_version(user) != refresh_token.password_version:
            tokens_revoke(AccessToken.objects.filter(family=refresh_token.family))
            raise InvalidGrantError("The grant ended: its user changed their password or was deactivated.")
        claimed = AccessToken.objects.filter(pk=refresh_token.pk, rotated_at__isnull=True,
                                             revoked_at__isnull=True).update(rotated_at=timezone.now())
        if not claimed:  # a concurrent refresh with the same token won: a replay
            _refresh_replayed(refresh_token)
            raise InvalidGrantError("The refresh token was used already.")
        return user

    def revoke_old_credential(self, refresh_token: AccessToken) -> None:
        tokens_revoke(AccessToken.objects.filter(pk=refresh_token.pk))

    def _validate_token_scope(self, token: AccessToken) -> None:
        scope = self.request.payload.scope
        if scope and not set(scope.split()) <= set(token.get_scope().split()):
            raise InvalidScopeError()


def _refresh_replayed(row: AccessToken) -> None:
    logger.warning("A used refresh token of client %s was presented again: its family is revoked", row.client_id)
    _reused(row, "refresh_token", tokens_revoke(AccessToken.objects.filter(family=row.family)))


class Revocation(RevocationEndpoint):
    """RFC 7009: an access or refresh token of the client; revoking either ends the whole grant (its family)."""

    CLIENT_AUTH_METHODS = ["none", "client_secret_post", "client_secret_basic"]

    def authenticate_token(self, request: OAuth2Request, client: Client) -> AccessToken | None:
        """The client's token named by the request. A `token_type_hint` this server does not know is ignored
        (RFC 7009 §2.1), not refused as Authlib does: both kinds are looked up whatever the hint."""
        if "token" not in request.form:
            raise InvalidRequestError("Send the token to revoke.")
        token = self.query_token(request.form["token"], request.form.get("token_type_hint"))
        if token is not None and not token.check_client(client):
            raise InvalidGrantError("The token was not issued to this client.")
        return token

    def query_token(self, token_string: str, token_type_hint: str | None) -> AccessToken | None:
        digest = key_digest(token_string)
        return AccessToken.objects.filter(access_hash=digest).first() or \
            AccessToken.objects.filter(refresh_hash=digest).first()

    def revoke_token(self, token: AccessToken, request: OAuth2Request) -> None:
        ended = tokens_revoke(AccessToken.objects.filter(family=token.family))
        audit("oauth.revoke", request=getattr(request, "_request", None), door="oauth",
              target=f"oauth_client:{token.client.client_id}",
              details={"user_id": token.user_id, "grants": 1 if ended else 0, "by": "app"})


def tokens_revoke(queryset: Any) -> int:
    """Revoke the live tokens of `queryset` now, in every process (each row's save announces it); returns how
    many."""
    count = 0
    with transaction.atomic():
        for row in queryset.filter(revoked_at__isnull=True).select_for_update():
            row.revoked_at = timezone.now()
            row.save(update_fields=["revoked_at"])
            count += 1
    return count


def consent_create(grant: Any) -> ConsentRequest:
    """Keep a checked authorization request for the user's decision (any process may take it); the rows whose
    time is over go first (oauth.trim)."""
    expired_rows_trim()
    request = grant.request
    params = {key: values[0] for key, values in request.payload.datalist.items() if values and key in CONSENT_PARAMS}
    return ConsentRequest.objects.create(id=secrets.token_urlsafe(24), client=request.client, params=params,
                                         expires_at=timezone.now() + CONSENT_TTL)


def consent_take(consent_id: str) -> ConsentRequest | None:
    """The consent request, removed so no one decides it twice; None when unknown, decided or expired."""
    with transaction.atomic():
        consent = ConsentRequest.objects.select_for_update().select_related("client").filter(pk=consent_id).first()
        if consent is None:
            return None
        consent.delete()
    return consent if consent.expires_at > timezone.now() else None


def consent_decide(consent: ConsentRequest, user: AbstractBaseUser | None, issuer: str) -> str:
    """The URL the browser goes to after the user's decision: the client's redirect URI with a code (allowed:
    `user` given) or `error=access_denied` (`user` None). The request is checked again first, on the origin it
    was made to (its resource's, checked at /oauth/authorize), not `issuer`, the origin of the decision's
    request, which may be another of the server's names. A request that no longer checks out (its client's
    registration changed) sends the browser back with the error, or raises AppError 400 when it cannot."""
    query = "&".join(f"{_quote(key)}={_quote(value)}" for key, value in consent.params.items())
    origin = origin_of(str(consent.params.get("resource") or issuer))
    request = OAuth2Request("GET", f"https://{origin.split('://', 1)[-1]}/oauth/authorize?{query}")
    request.uri = f"{origin}/oauth/authorize?{query}"
    request.payload = _Payload(consent.params)
    try:
        grant = server.get_consent_grant(request, end_user=user)
    except OAuth2Error as error:
        if not error.redirect_uri:
            raise AppError("invalid", f"The authorization request no longer checks out: {error.description}",
                           400) from error
        return with_issuer(server.handle_error_response(request, error)["Location"], origin)
    response = server.create_authorization_response(request, grant_user=user, grant=grant)
    return with_issuer(response["Location"], origin)


def with_issuer(location: str, issuer: str) -> str:
    """An authorization response (a code or an error) as it leaves: naming its issuer (`iss`, RFC 9207), so that a
    client of several authorization servers can tell which one answered and never sends a code to another."""
    return add_params_to_uri(location, [("iss", issuer)])


def _quote(value: str) -> str:
    return quote(str(value), safe="")


class _Payload(DjangoOAuth2Payload):
    """A stored request's parameters, as Authlib reads a query string."""

    def __init__(self, params: dict[str, str]):
        self._params = params

    @property
    def data(self) -> dict[str, str]:  # type: ignore[override]
        return dict(self._params)

    @property
    def datalist(self) -> dict[str, list[str]]:  # type: ignore[override]
        return {key: [value] for key, value in self._params.items()}


server = Server()
server.register_grant(AuthorizationCodeGrant, [CodeChallenge(required=True)])
server.register_grant(RefreshTokenGrant)
server.register_endpoint(Revocation)

"""The Bearer credential at a protected resource's door (/mcp, /a2a), read the one way both doors read it: an
access token this server issued for that resource (oauth.tokens), else an API key or a dashboard token
(accounts.caller; a key must hold the door's scope). A presented credential that does not stand is refused,
never taken for an anonymous caller."""

from __future__ import annotations

from accounts import caller
from accounts.authentication import bearer_scheme, bearer_token
from agentsite.core.errors import AppError
from oauth import tokens

Found = caller.Identity | tokens.Grant


async def authenticate(authorization: str | None, *, resource: str, scope: str, missing: str
                       ) -> tuple[Found | None, AppError | None]:
    """(the caller, None): a Grant for an access token, an accounts Identity for a key or a dashboard token; or
    (None, the refusal): 401 `not_authenticated` (no Bearer credential; `missing` says how to get one), 401
    `token_invalid` (presented and dead, or issued for another resource), 403 `insufficient_scope` (a token
    without the scope) or `key_scope` (a key without it)."""
    # The same codes as the API's: a Bearer header without a token is token_invalid.
    if not bearer_scheme(authorization):
        return None, AppError("not_authenticated", missing, 401)
    token = bearer_token(authorization)
    if token is None:
        return None, AppError("token_invalid", "The access token is invalid, expired or revoked; log in again.", 401)
    if tokens.is_access_token(token):
        try:
            return await tokens.aauthenticate(token, resource=resource, scope=scope), None
        except tokens.TokenRefused as exc:
            return None, AppError("insufficient_scope" if exc.status == 403 else "token_invalid", exc.detail,
                                  exc.status)
    try:
        return await caller.resolve(token, scope=scope, where="/" + scope), None
    except caller.Refused as exc:
        return None, AppError("token_invalid", exc.detail, 401)
    except AppError as exc:  # a key without the door's scope
        return None, exc

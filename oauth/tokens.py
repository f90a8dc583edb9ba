"""The access tokens this server issues, as credentials at /mcp and /a2a: recognised by their prefix, found by the
SHA-256 of the secret, cached per process (`tokens`, dropped in every process when a token's row changes:
oauth.apps), and standing only while unrevoked, unexpired, issued for the resource the request is made to (the
audience: a /mcp token is refused at /a2a and the reverse), and while their user's cached entry
(accounts.authentication.user_cache) is active and on the password the token was issued under. A token carries
its resource's one scope (`mcp` or `a2a`: oauth.resource), and acts as its user without admin rights.

A door calls `aauthenticate(raw, resource=<its resource URL on the request's origin>, scope=<its scope>)`:
/mcp with `resource_url(origin)` and `mcp`, /a2a with `a2a_resource_url(origin)` and `a2a`.
"""

from __future__ import annotations

import copy
import hmac
import secrets
import time
from typing import Any, NamedTuple

from django.contrib.auth.models import AbstractBaseUser

from accounts.authentication import KeyCache, key_digest, users
from accounts.authentication.key_last_used import LastUsed
from accounts.authentication.user_cache import _Entry
from agentsite.core.dbcall import db
from oauth.models import AccessToken
from oauth.resource import resource_canonical

ACCESS_PREFIX = "asa-"
REFRESH_PREFIX = "asr-"
CODE_PREFIX = "asc-"
SECRET_PREFIX = "ass-"


def new_secret(prefix: str) -> str:
    """A fresh random secret of 256 bits, with the prefix that says what it is."""
    return prefix + secrets.token_urlsafe(32)


def is_access_token(raw: str | None) -> bool:
    """Whether a credential is shaped as one of our access tokens: then it is checked as one, never as anything
    else."""
    return bool(raw) and raw.startswith(ACCESS_PREFIX)  # type: ignore[union-attr]


class TokenCache(KeyCache):
    """The access tokens requests name, per process, by their SHA-256 (KeyCache's rules)."""

    TOPIC = "oauthtoken"

    def row(self, digest: str) -> Any:
        return AccessToken.objects.filter(access_hash=digest).first()


tokens = TokenCache()
last_used = LastUsed(AccessToken)


class TokenRefused(Exception):
    """The token does not stand; `detail` says why, `status` 401 (dead) or 403 (wrong scope)."""

    def __init__(self, detail: str, status: int = 401):
        super().__init__(detail)
        self.detail, self.status = detail, status


class TokenCredential(NamedTuple):
    """An access token as a request presented it (its digest) and the resource it was presented to."""

    digest: str
    resource: str


def _stands(credential: TokenCredential, row: Any, user_entry: _Entry | None, scope: str) -> None:
    if row is None or not hmac.compare_digest(row.access_hash, credential.digest):
        raise TokenRefused("The access token is not known.")
    if row.revoked_at is not None:
        raise TokenRefused("The access token was revoked.")
    if row.expires_at.timestamp() <= time.time():
        raise TokenRefused("The access token expired; refresh it.")
    if resource_canonical(row.resource) != resource_canonical(credential.resource):
        raise TokenRefused(f"The access token was issued for another resource ({row.resource}), not "
                           f"{credential.resource}.")
    if user_entry is None:
        raise TokenRefused("The access token's user no longer exists.")
    if not user_entry.user.is_active:
        raise TokenRefused("The access token's user was deactivated.")
    if not hmac.compare_digest(row.password_version, user_entry.password_version):
        raise TokenRefused("The access token was issued before its user's password changed; authorize again.")
    if scope not in row.scope.split():
        raise TokenRefused(f"The access token lacks the scope '{scope}'.", 403)


async def _entries(digest: str) -> tuple[Any, _Entry | None]:
    hit, entry = tokens.fresh(digest)
    if not hit:
        entry = await db(tokens.load, digest)
    if entry is None:
        return None, None
    hit, user_entry = users.fresh(entry.key.user_id)
    if not hit:
        user_entry = await db(users.load, entry.key.user_id)
    return entry.key, user_entry


class Grant(NamedTuple):
    """Who a live access token acts as: a copy of its user without admin rights (an app connected through
    OAuth never gets an admin's tools, as an API key without the `admin` scope does not), the credential to
    check again while a stream runs, and the client it was issued to."""

    user: AbstractBaseUser
    credential: TokenCredential
    client_pk: int


async def aauthenticate(raw: str, *, resource: str, scope: str = "mcp") -> Grant:
    """The Grant of a live access token presented to `resource` (the door's resource URL on the request's origin:
    oauth.resource) needing `scope`; raises TokenRefused (401: dead, or issued for another resource; 403: without
    `scope`). A cached token and user cost no database thread."""
    credential = TokenCredential(key_digest(raw), resource)
    row, user_entry = await _entries(credential.digest)
    _stands(credential, row, user_entry, scope)
    assert user_entry is not None
    last_used.touch(row.pk)
    user = copy.copy(user_entry.user)
    user.is_staff = user.is_superuser = False
    return Grant(user, credential, row.client_id)


async def problem(credential: TokenCredential, scope: str = "mcp") -> str | None:
    """None while the token still stands (as `aauthenticate` judges it, its expiry aside: a stream opened with
    a valid token is not cut when it merely expires), else why not."""
    row, user_entry = await _entries(credential.digest)
    try:
        if row is not None and row.expires_at.timestamp() <= time.time():
            row = copy.copy(row)
            row.expires_at = type(row.expires_at).max.replace(tzinfo=row.expires_at.tzinfo)
        _stands(credential, row, user_entry, scope)
    except TokenRefused as exc:
        return exc.detail
    return None

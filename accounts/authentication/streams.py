"""Long responses (the chat, workflow and /v1 streams, /mcp) were authenticated once, when they opened: `revocable`
checks their credential again before each event and ends the stream with an error event once it no longer
stands (a logout, a password change, a deactivated or deleted user, a revoked or expired key). A token that
merely expires mid-stream is not cut: it was valid when the stream opened."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from rest_framework_simplejwt.exceptions import AuthenticationFailed, InvalidToken

from accounts.authentication.api_keys import KeyCredential, _akey_entries, _key_stands, is_api_key, key_digest
from accounts.authentication.bearer import bearer_token
from accounts.authentication.jwt_auth import _astands, _validated
from agentsite.core import sse
from agentsite.core.errors import AppError

logger = logging.getLogger(__name__)


def credential_of(header: str | None) -> Any | None:
    """The credential of an `Authorization: Bearer` header: an API key's `KeyCredential`, or the validated
    access token (CPU only), or None."""
    raw = bearer_token(header)
    if raw and is_api_key(raw):
        return KeyCredential(key_digest(raw))
    return _validated(raw) if raw else None


async def credential_problem(credential: Any) -> AppError | None:
    """None while a credential (from `credential_of`) still stands: for a token, its user exists and is
    active, and neither a password change nor a logout revoked it; for an API key, `key_problem`'s checks
    (expiry included). Otherwise the AppError 401 `token_invalid` that says which. A token's expiry is not
    checked (see the module docstring). Cached entries cost no database thread."""
    try:
        if isinstance(credential, KeyCredential):
            entry, user_entry = await _akey_entries(credential.digest)
            _key_stands(credential.digest, entry, user_entry)
        else:
            await _astands(credential)  # no copy of the user: this runs before every event of a stream
    except (AuthenticationFailed, InvalidToken) as exc:
        detail = exc.detail.get("detail") if isinstance(exc.detail, dict) else exc.detail  # simplejwt's are dicts
        return AppError("token_invalid", str(detail or "The token is invalid; log in again."), 401)
    return None


def revocable(stream: AsyncIterator[bytes], header: str | None,
              error_event: Callable[[AppError], bytes] | None = None, *,
              credential: Any | None = None) -> AsyncIterator[bytes]:
    """`stream` (a response's SSE events), ended at its next event with `error_event` (default: the API's
    `error {code, message}` event) once the bearer credential of `header` (or `credential`, from
    `credential_of` or a `KeyCredential`: an x-api-key) no longer stands. Call it with the header the stream
    was authenticated with; without a credential (an anonymous /v1 call), `stream` as is."""
    token = credential if credential is not None else credential_of(header)
    if token is None:
        return stream
    return sse.ended_when(stream, lambda: credential_problem(token), error_event or sse.error_event)

"""Who is calling: the credential a request presents, resolved once to the user, the API key, the scopes it grants
and the usage caller whose budget applies. The /v1 doors, the /api chat stream and /mcp all ask this module, so a
key's scope, a dead token and a budget are judged alike on every door."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from rest_framework_simplejwt.exceptions import AuthenticationFailed, InvalidToken

from accounts.authentication import (
    KeyCredential,
    aauthenticate_key,
    aauthenticate_token,
    credential_of,
    failure_detail,
    is_api_key,
    scope_problem,
)
from agentsite.agent.usage import Caller

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser


class Identity(NamedTuple):
    """A resolved caller. `key` is the API key (None for a dashboard token or an anonymous caller); `credential`
    what `credential_problem` re-checks while a stream runs (None: anonymous, nothing to re-check)."""

    user: AbstractBaseUser | None
    key: Any
    credential: Any

    @property
    def user_id(self) -> int | None:
        return getattr(self.user, "pk", None)

    @property
    def scopes(self) -> tuple[str, ...]:
        """What the credential may do: a key's scopes; a dashboard token may do everything its user may."""
        return tuple(self.key.scopes) if self.key is not None else ("*",)

    def usage(self, facet: str) -> Caller:
        """The caller usage metering charges, whose budgets apply (a key's own budget first)."""
        return Caller.with_key(self.user_id, self.key, facet)


ANONYMOUS = Identity(None, None, None)


class Refused(Exception):
    """The credential does not stand (unknown, revoked, expired, its user gone or deactivated): `detail` says
    which. Each door answers it in its own words (its error code and realm)."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


async def resolve(raw: str, *, scope: str, where: str) -> Identity:
    """The caller of a raw credential: an API key (`ask-…`), which must hold `scope` (else the AppError 403
    `key_scope` naming `where`), or a dashboard token. Raises Refused when it does not stand. Cached keys and
    users cost no database thread."""
    try:
        if is_api_key(raw):
            user, key = await aauthenticate_key(raw)
            credential: Any = KeyCredential(key.hash)
        else:
            (user, credential), key = await aauthenticate_token(raw), None
    except (AuthenticationFailed, InvalidToken) as exc:
        raise Refused(failure_detail(exc)) from exc
    problem = scope_problem(key, scope, where)
    if problem is not None:
        raise problem
    return Identity(user, key, credential)


def authenticated(user: AbstractBaseUser | None, key: Any, authorization: str | None) -> Identity:
    """The Identity of a request a view's decorator already authenticated from its `Authorization` header (the
    /api streams: accounts.authentication.async_post_view)."""
    return Identity(user, key, credential_of(authorization))

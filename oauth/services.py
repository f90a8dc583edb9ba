"""Writes of the oauth app's grants: the ways the tokens it issued end before their time (an app disconnected, an
admin's revocation, the user's password change, deactivation or deletion).

Invariant: every revocation goes through oauth.server.tokens_revoke, which saves row by row, so each save drops
the token's cached entry in every process (oauth.apps); a queryset update() would drop nothing, and a revoked
token would go on working wherever it was cached.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet

from accounts.tokens import password_version
from agentsite.core.audit import audit
from oauth import selectors
from oauth.models import AccessToken
from oauth.server import tokens_revoke


def app_disconnect(*, user_id: int, client_id: str, request: Any = None) -> int:
    """End every token the client holds for the user, now, in every process; returns how many grants ended
    (0: no such app is connected to the user)."""
    live = selectors.live_tokens(user_id, client_id)
    families = len(set(live.values_list("family", flat=True)))
    if not tokens_revoke(live):
        return 0
    audit("oauth.revoke", request=request, door="api" if request is not None else "system",
          target=f"oauth_client:{client_id}", details={"user_id": user_id, "grants": families})
    return families


def grants_revoke(*, tokens: QuerySet[AccessToken], request: Any = None) -> int:
    """End the grants (families) of `tokens`, as an admin does from Django admin; returns how many tokens ended."""
    rows = list(tokens.values_list("family", "client__client_id", "user_id"))
    count = tokens_revoke(AccessToken.objects.filter(family__in={family for family, _, _ in rows}))
    for client_id, user_id in sorted({(client_id, user_id) for _, client_id, user_id in rows}):
        audit("oauth.revoke", request=request, door="admin", target=f"oauth_client:{client_id}",
              details={"user_id": user_id})
    return count


def user_tokens_end(*, user: AbstractBaseUser) -> int:
    """End the user's tokens that no longer stand: all of them once the user is deactivated, else those issued
    under another password. (They are refused already, by oauth.tokens; this marks them revoked, so that the
    connected apps drop out of the list and a refresh is refused.) Returns how many."""
    tokens = AccessToken.objects.filter(user_id=user.pk, revoked_at__isnull=True)
    if user.is_active:
        tokens = tokens.exclude(password_version=password_version(user))
    return tokens_revoke(tokens)

"""The authorization server's rows whose time is over, removed so they never pile up: consents past their time,
codes an hour past theirs (a used code is kept that long so that a replay still finds it and revokes what it
made), tokens past their refresh token's end (an access token without one: past its own). Run on each new
registration and each authorization request, which are what add rows; each delete is one indexed query.

Invariant: nothing that can still be used, or whose replay must still be detected within its time, is removed.
"""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from oauth.models import AccessToken, AuthorizationCode, ConsentRequest

# How long a code is kept past its time: a replay within it still revokes the tokens made from the code.
CODE_KEPT = timedelta(hours=1)


def expired_rows_trim() -> dict[str, int]:
    """Delete the expired consents, codes and tokens; returns how many of each."""
    now = timezone.now()
    consents, _ = ConsentRequest.objects.filter(expires_at__lte=now).delete()
    codes, _ = AuthorizationCode.objects.filter(expires_at__lte=now - CODE_KEPT).delete()
    # A token's row is its grant's memory (reuse detection) until its refresh token ends; the deletion is
    # announced per row (oauth.apps), so no process keeps a cached copy.
    tokens, _ = AccessToken.objects.filter(
        Q(refresh_expires_at__lte=now) | Q(refresh_expires_at__isnull=True, expires_at__lte=now)).delete()
    return {"consents": consents, "codes": codes, "tokens": tokens}

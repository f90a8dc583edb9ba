"""The Streamable HTTP sessions of `/mcp`, in the database: opened by a successful `initialize`, found by any
process of the deployment, ended by the client's DELETE or after IDLE_S without a request.

The SDK's transport runs stateless (each request served on its own, wherever it lands); a session here is
only what must outlive a request: its owner (a request with another credential finds nothing: the same 404
as an unknown session) and its negotiated protocol version. Invariant: every function answers for the owner
it is given only; a session id alone is never enough.
"""

from __future__ import annotations

import secrets
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from mcpbridge.models import McpHttpSession

# As the SDK's own sessions (its session_idle_timeout default): a session unused this long is gone.
IDLE_S = 30 * 60
# last_seen_at is written at most once a minute per session: a read alone answers the other requests.
TOUCH_EVERY_S = 60
# A client that never sends DELETE (a crash, a script) leaves sessions behind: past this many live ones for
# one owner, opening another forgets the least recently used.
MAX_PER_OWNER = 100
ID_LENGTH = 32  # hex digits: 128 random bits


def http_session_open(*, owner: str, protocol_version: str) -> str:
    """A new session of `owner`; its id."""
    now = timezone.now()
    session_id = secrets.token_hex(ID_LENGTH // 2)
    with transaction.atomic():
        McpHttpSession.objects.filter(last_seen_at__lt=now - timedelta(seconds=IDLE_S)).delete()
        stale = (McpHttpSession.objects.filter(owner=owner).order_by("-last_seen_at")
                 .values_list("session_id", flat=True)[MAX_PER_OWNER - 1:])
        if stale:
            McpHttpSession.objects.filter(session_id__in=list(stale)).delete()
        McpHttpSession.objects.create(session_id=session_id, owner=owner, protocol_version=protocol_version,
                                      last_seen_at=now)
    return session_id


def http_session_find(*, session_id: str, owner: str) -> str | None:
    """The negotiated protocol version of `owner`'s live session `session_id` (its use noted), or None when
    there is no such session for that owner."""
    if len(session_id) != ID_LENGTH:
        return None
    now = timezone.now()
    found = (McpHttpSession.objects.filter(session_id=session_id, owner=owner,
                                           last_seen_at__gte=now - timedelta(seconds=IDLE_S))
             .values_list("protocol_version", "last_seen_at").first())
    if found is None:
        return None
    version, last_seen_at = found
    if now - last_seen_at > timedelta(seconds=TOUCH_EVERY_S):
        McpHttpSession.objects.filter(session_id=session_id).update(last_seen_at=now)
    return version


def http_session_close(*, session_id: str, owner: str) -> bool:
    """End `owner`'s session `session_id`; whether there was one."""
    if len(session_id) != ID_LENGTH:
        return False
    deleted, _ = McpHttpSession.objects.filter(session_id=session_id, owner=owner).delete()
    return deleted > 0

"""Writes of remote A2A agents: register one (its card fetched and checked first), fetch its card again, remove it.
Header values are sealed (agentsite.core.secretbox) before they are stored and never returned or logged."""

from __future__ import annotations

import logging
import re

from asgiref.sync import async_to_sync
from django.db import IntegrityError, transaction

from a2a_app.models import A2ARemote
from a2a_app.selectors import HEADER_PURPOSE, remote_spec
from agentsite.core.errors import AppError
from agentsite.core.secretbox import seal
from organisation.access import access_set
from organisation.models import PRIVATE
from organisation.policy import RESOURCES

logger = logging.getLogger(__name__)

MAX_HEADERS = 20
MAX_HEADER_VALUE = 8_000
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")  # an HTTP token (RFC 9110)
# Set by the client itself: a remote's headers may not replace them.
RESERVED_HEADERS = frozenset({"host", "content-length", "content-type", "transfer-encoding", "connection",
                              "accept", "a2a-version", "te", "upgrade"})


def headers_checked(headers: dict[str, str]) -> dict[str, str]:
    """The headers, each name an HTTP token not set by the client, each value one line of visible Latin-1.
    Raises AppError 400 `invalid` naming `headers.<Name>`."""
    if len(headers) > MAX_HEADERS:
        raise AppError("invalid", f"At most {MAX_HEADERS} headers.", 400, {"headers": [f"At most {MAX_HEADERS}."]})
    for name, value in headers.items():
        problem = _header_problem(name, value)
        if problem:
            raise AppError("invalid", f"headers.{name}: {problem}", 400, {f"headers.{name}": [problem]})
    return dict(headers)


def _header_problem(name: str, value: str) -> str | None:
    if not HEADER_NAME.match(name):
        return "Not a header name (letters, digits and !#$%&'*+.^_`|~-, at most 100)."
    if name.lower() in RESERVED_HEADERS:
        return "The client sets this header itself."
    if not value or len(value) > MAX_HEADER_VALUE:
        return f"Give a value of 1-{MAX_HEADER_VALUE} characters."
    if any(ord(char) > 255 or (ord(char) < 32 and char != "\t") or ord(char) == 127 for char in value):
        return "A value is one line of Latin-1 text (no control characters)."
    return None


def _fetched_card(url: str, headers: dict[str, str]) -> dict:
    # Start-up cost: the SDK's client (and starlette under it) is imported when a card is first fetched.
    from a2a_app.cards import card_fetch

    return async_to_sync(card_fetch)(url, headers=headers)


def remote_create(*, name: str, url: str, headers: dict[str, str], visibility: str = PRIVATE,
                  grants: list[dict] | None = None) -> A2ARemote:
    """Fetch and check the remote's card (with its headers), then store the remote with its headers sealed and its
    access rule (as PUT .../access would set it). Nothing is stored on failure.

    Raises AppError 400 `invalid` (headers, the guard's refusal of the URL, the rule), 409 `conflict` (name
    taken), 502 `remote_unreachable`, 422 `card_invalid`.
    """
    if A2ARemote.objects.filter(name=name).exists():
        raise _conflict(name)
    headers = headers_checked(headers)
    card = _fetched_card(url, headers)
    try:
        with transaction.atomic():
            remote = A2ARemote.objects.create(
                name=name, url=url, card=card, owner=None, visibility=PRIVATE,
                headers={key: seal(value, purpose=HEADER_PURPOSE) for key, value in headers.items()})
            if visibility != PRIVATE or grants:
                access_set(kind=RESOURCES["a2a_remote"], resource=remote, visibility=visibility, grants=grants or [])
    except IntegrityError:
        raise _conflict(name) from None
    logger.info("A2A remote %r registered (%s)", name, card.get("name", ""))
    return remote


def remote_refresh(*, remote: A2ARemote) -> A2ARemote:
    """Fetch the remote's card again and store it. Raises AppError as remote_create (the stored card is kept on
    failure)."""
    spec = remote_spec(remote)
    remote.card = _fetched_card(remote.url, spec.headers)
    remote.save(update_fields=["card", "updated_at"])
    return remote


def remote_delete(*, remote: A2ARemote) -> None:
    """Remove the remote (its grants with it): its tool is gone from the next listing, in every process (listings
    read the database, nothing is cached)."""
    remote.delete()
    logger.info("A2A remote %r removed", remote.name)


def _conflict(name: str) -> AppError:
    return AppError("conflict", f"The name {name!r} is taken; remove that remote first or pick another name.", 409,
                    {"name": [f"{name!r} is taken."]})

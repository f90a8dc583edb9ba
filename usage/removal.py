"""Deleting a user (an admin's `DELETE /api/users/:id`): never while they own a shared resource nobody has taken
over. What the access policy registers (organisation.policy: workflows, collections, ...) is handed to another
user first, in the delete's own transaction, or the delete is refused naming it; everything else of theirs
(sessions, runs they started, keys, usage rows) goes with them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.db import transaction

from agentsite.core.audit import audit
from agentsite.core.errors import AppError
from organisation.services import owned_by, transfer_all

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser


def user_delete(*, actor: AbstractBaseUser, user: AbstractBaseUser, transfer_to: int | None = None,
                request: Any = None) -> dict[str, int]:
    """Delete `user`, handing what they own to the user `transfer_to` first (all or nothing). Returns the count
    handed over per kind. Raises AppError 409 `conflict` (the actor's own account; something owned and no
    `transfer_to`, `details.owned`; a name the new owner holds already, nothing moved), 400 `invalid` (no such
    active user to hand over to, or the user themselves)."""
    if user.pk == actor.pk:
        raise AppError("conflict", "You cannot delete your own account; ask another admin.", 409)
    heir = None
    if transfer_to is not None:
        if transfer_to == user.pk:
            raise AppError("invalid", "transfer_to must name another user than the one deleted.", 400,
                           {"transfer_to": ["The user being deleted."]})
        heir = get_user_model().objects.filter(pk=transfer_to, is_active=True).first()
        if heir is None:
            raise AppError("invalid", f"No active user with id {transfer_to}.", 400,
                           {"transfer_to": ["No such active user."]})
    user_id, username = user.pk, user.get_username()
    with transaction.atomic():
        # Locked: on PostgreSQL a row that references the user (a workflow they create now) waits for this
        # transaction, so nothing they make meanwhile is deleted with them unlisted.
        get_user_model().objects.select_for_update().filter(pk=user_id).exists()
        owned = owned_by(user)
        if owned and heir is None:
            kinds = ", ".join(f"{len(items)} {kind}(s)" for kind, items in sorted(owned.items()))
            raise AppError("conflict", f"{username} owns {kinds}; hand them over first (?transfer_to=<user id>).",
                           409, {"owned": owned})
        moved = transfer_all(user=user, to_user=heir, request=request) if heir is not None else {}
        user.delete()
    audit("user.delete", request=request, actor=actor, target=f"user:{user_id}",
          details={"username": username, "transferred_to": heir.pk if heir is not None else None,
                   "transferred": {kind: [item["id"] for item in items] for kind, items in owned.items()}})
    return moved

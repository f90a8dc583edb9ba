"""The Responses door's stored responses (compat.models.StoredResponse): saved for their owner, found by the
owner only (another's is a 404 like a missing one), and continued through `previous_response_id`."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from django.db.models import QuerySet

from agentsite.core.dbcall import db
from agentsite.core.errors import AppError
from compat.models import StoredResponse

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

# What `new_id("resp")` makes: anything else names no stored response, and is answered without a query (a NUL
# would otherwise reach PostgreSQL, which refuses it in a string literal).
RESPONSE_ID = re.compile(r"resp_[0-9a-f]{32}")


def owned(user: AbstractBaseUser | None, response_id: str) -> QuerySet[StoredResponse]:
    """The caller's stored response of that id, as a query (empty for an id `new_id` cannot have made)."""
    user_id = getattr(user, "pk", None)
    objects = StoredResponse.objects
    if RESPONSE_ID.fullmatch(response_id) is None:
        return objects.none()
    mine = objects.filter(owner_id=user_id) if user_id is not None else objects.filter(owner__isnull=True)
    return mine.filter(id=response_id)


def not_found() -> AppError:
    return AppError("not_found", "No stored response of that id (or not yours).", 404)


async def history(user: AbstractBaseUser | None, response_id: str) -> list[dict[str, Any]]:
    """The conversation a stored response ends, for `previous_response_id` (404 naming it when not found)."""
    stored = await db(lambda: owned(user, response_id).values_list("history", flat=True).first())
    if stored is None:
        raise AppError("not_found", "previous_response_id: no stored response of that id (or not yours).",
                       404, {"previous_response_id": ["not found"]})
    return stored


async def save(run: Any, response: dict[str, Any]) -> None:
    """Keeps a run's response (compat.responses.run.ResponseRun) and the whole conversation it ends: the previous
    response's history, this request's input items, then its output items."""
    history = [*run.history, *run.items, *response["output"]]
    owner = run.user if getattr(run.user, "pk", None) is not None else None
    await db(lambda: StoredResponse.objects.create(
        id=run.rid, owner=owner, history=history, response=response, previous=run.spec.previous_response_id or "",
        instructions=run.spec.instructions or ""))

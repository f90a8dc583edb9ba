"""How chat attachments (upload ids) become content parts.

The uploads store is the uploads app; it installs a resolver here (uploads/apps.py). An
id that is not one of the caller's uploads (another user's, a deleted one, one that never existed) answers
404 before anything is stored or streamed: ids do not leak (docs/api.md, Ownership). Without a resolver no
upload id can exist, so any attachment answers the same 404.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from agentsite.agent.types import ContentPart
from agentsite.core.errors import AppError

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

# resolver(owner, upload_ids, missing_ok) -> {upload_id: [parts]}, keyed by the ids as given; raises AppError
# 404 `not_found` (details.attachments) for an id that is not one of owner's uploads, unless missing_ok (an
# earlier turn's upload deleted since), when such an id maps to a part saying it is gone.
Resolver = Callable[..., dict[str, list[ContentPart]]]
_resolver: Resolver | None = None


def set_attachment_resolver(resolver: Resolver | None) -> None:
    global _resolver
    _resolver = resolver


def attachments_resolve(*, owner: AbstractBaseUser, upload_ids: list[str], missing_ok: bool = False,
                        ) -> dict[str, list[ContentPart]]:
    """Content parts for each upload id of owner (sync: reads the database and the files).

    Raises AppError 404 `not_found` when an id is not one of owner's uploads, unless missing_ok (the
    earlier turns of a conversation, whose uploads may have been deleted since).
    """
    if not upload_ids:
        return {}
    if missing_ok:
        return _resolver(owner, upload_ids, missing_ok=True) if _resolver is not None else {}
    if _resolver is None:
        raise AppError("not_found", "An attachment is not one of your uploads: this server stores no uploads.",
                       404, {"attachments": [f"No such upload: {upload_id}" for upload_id in upload_ids]})
    return _resolver(owner, upload_ids)

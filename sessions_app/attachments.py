"""How chat attachments (upload ids) become content parts.

The uploads store belongs to the voice-and-uploads facet; it installs a resolver here. Until one is
installed, no upload id can exist, so any attachment is refused with a clear 400.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentsite.agent.types import ContentPart
from agentsite.errors import AppError

# resolver(owner, upload_ids) -> {upload_id: [parts]}; raises AppError 400 for an unknown or foreign id.
Resolver = Callable[[Any, list[str]], dict[str, list[ContentPart]]]
_resolver: Resolver | None = None


def set_attachment_resolver(resolver: Resolver | None) -> None:
    global _resolver
    _resolver = resolver


def attachments_resolve(*, owner: Any, upload_ids: list[str]) -> dict[str, list[ContentPart]]:
    """Content parts for each upload id of owner (sync: reads the database)."""
    if not upload_ids:
        return {}
    if _resolver is None:
        raise AppError("invalid", "Unknown upload id(s): uploads are not enabled on this server.", 400,
                       {"attachments": [f"Unknown upload: {upload_id}" for upload_id in upload_ids]})
    return _resolver(owner, upload_ids)

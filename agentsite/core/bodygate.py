"""What a request may send, decided before a byte of its body is read: the body limit of a path, and the registry
of body gates, checks a facet runs on the headers (the /v1 caller, so that an unauthenticated 10 MB body costs
nothing to refuse). A facet adds (path prefix, gate) in its AppConfig.ready(); agentsite.server.asgi_limits
enforces the limits and runs the gates, and a view that reads its own body (the upload's JSON) asks the same
limit. A gate takes the ASGI scope, may leave what it learnt in it for the view, and returns the AppError that
refuses the request, or None."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings

from agentsite.core.errors import AppError

Gate = Callable[[dict[str, Any]], Awaitable[AppError | None]]

# (path prefix, gate); filled in by AppConfig.ready() of a facet. A gate runs for the POST requests under it.
BODY_GATES: list[tuple[str, Gate]] = []


def body_limit_for(path: str) -> int:
    """The largest body a path takes: MAX_BODY_BYTES, or its own (MAX_BODY_BYTES_BY_PATH: the upload path, whose
    10 MB file comes in a multipart or base64 envelope). `path` is decoded, without the query string."""
    limit: int = getattr(settings, "MAX_BODY_BYTES_BY_PATH", {}).get(path, settings.MAX_BODY_BYTES)
    return limit


def gate_for(path: str, method: str) -> Gate | None:
    if method != "POST":
        return None
    return next((gate for prefix, gate in BODY_GATES if path.startswith(prefix)), None)

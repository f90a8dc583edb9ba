"""The registry of body gates: checks a facet runs on a request's headers before a byte of its body is read (the
/v1 caller, so that an unauthenticated 10 MB body costs nothing to refuse). A facet adds (path prefix, gate) in
its AppConfig.ready(); agentsite.server.asgi_limits runs the gates. A gate takes the ASGI scope, may leave what it
learnt in it for the view, and returns the AppError that refuses the request, or None."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from agentsite.core.errors import AppError

Gate = Callable[[dict[str, Any]], Awaitable[AppError | None]]

# (path prefix, gate); filled in by AppConfig.ready() of a facet. A gate runs for the POST requests under it.
BODY_GATES: list[tuple[str, Gate]] = []


def gate_for(path: str, method: str) -> Gate | None:
    if method != "POST":
        return None
    return next((gate for prefix, gate in BODY_GATES if path.startswith(prefix)), None)

"""The registry of ASGI apps mounted next to Django: a facet adds (path prefix, factory) in its AppConfig.ready(),
and the router (agentsite/server/routing.py) serves them. Here, not in the router, so that an app registers
without importing the server layer (docs/architecture.md: dependencies point one way)."""

from __future__ import annotations

from collections.abc import Callable

# (path prefix, factory returning an ASGI app); filled in by AppConfig.ready() of a facet.
MOUNTS: list[tuple[str, Callable]] = []

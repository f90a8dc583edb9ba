"""Work a facet does once when the service starts, before it serves: e.g. marking runs that a crashed process
left `running` as `error`. `manage.py serve` runs these after migrating; a deployment that starts the
pieces itself runs `manage.py recover` once per start (see the README)."""

from __future__ import annotations

import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)

_hooks: dict[str, Callable[[], object]] = {}


def on_service_start(name: str, hook: Callable[[], object]) -> None:
    """Register `hook` (sync; it may use the ORM) under a name, replacing an earlier one of that name."""
    _hooks[name] = hook


def run_start_hooks() -> dict[str, object]:
    """Sweep the work dead processes left running (work that names no process included), then run every
    hook; one that fails is logged and does not stop the others. Returns their results by name."""
    from agentsite.core.processes import sweep_dead

    results: dict[str, object] = {"work left running by stopped processes": sweep_dead(include_unowned=True)}
    for name, hook in list(_hooks.items()):
        try:
            results[name] = hook()
        except Exception:  # a boundary: a broken facet must not keep the service from starting
            logger.exception("The start-up hook %r failed", name)
            results[name] = None
    return results

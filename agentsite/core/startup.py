"""Work a facet does once when the service starts, before it serves: e.g. marking runs that a crashed process
left `running` as `error`. `manage.py serve` runs these after migrating; a deployment that starts the
pieces itself runs `manage.py recover` once per start (see the README).

And loops a facet runs while the service runs, one per host (the scheduler's timer): `manage.py serve` runs
each on a thread of its own beside its task cluster; a deployment that starts the pieces itself runs
`manage.py clock` (docs/deploying.md). A loop is `loop(stop)`: it runs until the `threading.Event` stop is
set, returns soon after, and handles its own errors (one that escapes is logged, and the loop is started
again a second later). A loop that sleeps on something other than its stop event (a socket) registers a
`wake()` too, which stopping calls once the event is set, so that the loop sees it at once."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from agentsite.core.processes import sweep_dead

logger = logging.getLogger(__name__)

_hooks: dict[str, Callable[[], object]] = {}
_loops: dict[str, Callable[[threading.Event], object]] = {}
_loop_wakes: dict[str, Callable[[], object]] = {}
LOOP_RESTART_S = 1.0


def on_service_start(name: str, hook: Callable[[], object]) -> None:
    """Register `hook` (sync; it may use the ORM) under a name, replacing an earlier one of that name."""
    _hooks[name] = hook


def run_start_hooks() -> dict[str, object]:
    """Sweep the work dead processes left running (work that names no process included), then run every
    hook; one that fails is logged and does not stop the others. Returns their results by name."""

    results: dict[str, object] = {"work left running by stopped processes": sweep_dead(include_unowned=True)}
    for name, hook in list(_hooks.items()):
        try:
            results[name] = hook()
        except Exception:  # a boundary: a broken facet must not keep the service from starting
            logger.exception("The start-up hook %r failed", name)
            results[name] = None
    return results


def on_service_loop(name: str, loop: Callable[[threading.Event], object],
                    wake: Callable[[], object] | None = None) -> None:
    """Register `loop(stop)` (see the module docstring) under a name, replacing an earlier one of that name;
    `wake()`, when given, interrupts the loop's sleep."""
    _loops[name] = loop
    _loop_wakes.pop(name, None)
    if wake is not None:
        _loop_wakes[name] = wake


class ServiceLoops:
    """The registered loops, each on a daemon thread; stop() sets their stop event and waits a little."""

    def __init__(self) -> None:
        self.stop_event = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(name, loop), name=f"agentsite-loop-{name}",
                                         daemon=True) for name, loop in list(_loops.items())]
        for thread in self.threads:
            thread.start()

    def _run(self, name: str, loop: Callable[[threading.Event], object]) -> None:
        while not self.stop_event.is_set():
            try:
                loop(self.stop_event)
            except Exception:  # a boundary: a loop's bug must not stop the service; it starts again
                logger.exception("The service loop %r failed; starting it again", name)
            self.stop_event.wait(LOOP_RESTART_S)

    def stop(self, timeout: float = 5.0) -> None:
        self.stop_event.set()
        for name, wake in list(_loop_wakes.items()):
            try:
                wake()
            except Exception:  # a boundary: the loop then stops at the end of its sleep
                logger.exception("Could not wake the service loop %r to stop it", name)
        for thread in self.threads:
            thread.join(timeout)


def service_loops_start() -> ServiceLoops:
    """Start every registered loop on a thread of its own."""
    return ServiceLoops()

"""The scheduler's timer: runs the tick at each task's instant, not on a fixed beat.

One loop a host (`serve` runs it beside its task cluster; `manage.py clock` otherwise) reads the earliest
`next_run_at`, ticks when it has come, and otherwise sleeps until then or until woken: a saved task is announced
on the invalidation channel (topic TOPIC) and `wake` ends the sleep (on SQLite through a doorbell). Without a
channel it reads the database every POLL_S; with one, still every CONNECTED_IDLE_S. Exactly once per occurrence
is the tick's guarantee, not the timer's: several timers may tick at the same instant.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime

from django.db import close_old_connections
from django.db.models import Min
from django.utils import timezone

from agentsite.core import invalidation, localwake
from scheduler.models import ScheduledTask
from scheduler.services import TOPIC, tick

logger = logging.getLogger(__name__)

POLL_S = 1.0  # without the invalidation channel: how often another process's change is looked for
CONNECTED_IDLE_S = 30.0  # with it: a change wakes the timer; this bounds what a lost announcement costs
BUSY_RETRY_S = 0.05  # due tasks another tick holds (skip_locked): look again this soon

_wake = threading.Event()
DOORBELL = localwake.Doorbell("scheduler-timer")
_doorbell_sleeper = threading.Lock()  # held by the one timer thread of this process that sleeps on DOORBELL


def wake(_key: object = None) -> None:
    """Wake this process's timer (a task changed, or it is told to stop): it reads the earliest instant again."""
    _wake.set()
    if localwake.available():
        DOORBELL.ring()


def earliest_next_run() -> datetime | None:
    return ScheduledTask.objects.filter(enabled=True).aggregate(earliest=Min("next_run_at"))["earliest"]


def run(stop: threading.Event, *, now: Callable[[], datetime] = timezone.now) -> None:
    """The timer's loop (a service loop: until stop is set)."""
    invalidation.subscribe(TOPIC, wake)
    invalidation.listen()
    # One timer thread a process sleeps on the doorbell: a ring wakes one sleeper, so a second one could miss
    # it (a stop among them). Another timer of this process (tests) waits on the event, looking every 0.5 s.
    ringable = localwake.available() and DOORBELL.listen() and _doorbell_sleeper.acquire(blocking=False)
    try:
        _loop(stop, now, ringable)
    finally:
        if ringable:
            _doorbell_sleeper.release()


def _loop(stop: threading.Event, now: Callable[[], datetime], ringable: bool) -> None:
    logger.info("Scheduler timer started")
    while not stop.is_set():
        _wake.clear()
        close_old_connections()  # a connection that failed is replaced (the loop lives as long as the service)
        instant = now()
        earliest = earliest_next_run()
        if earliest is not None and earliest <= instant:
            if not tick(now=instant):  # another tick holds them, or recorded them first
                _sleep(stop, BUSY_RETRY_S, ringable)
            continue
        idle = CONNECTED_IDLE_S if ringable or invalidation.connected() else POLL_S
        wait = idle if earliest is None else min(idle, (earliest - instant).total_seconds())
        _sleep(stop, wait, ringable)
    logger.info("Scheduler timer stopped")


def _sleep(stop: threading.Event, seconds: float, ringable: bool) -> None:
    """Until `seconds` have passed, a wake, or stop. On the doorbell a wake (stop included: the service loops
    call `wake` after setting it) ends the sleep at once; without it, stop is looked at every half second."""
    deadline = time.monotonic() + max(0.0, seconds)
    while not stop.is_set():
        left = deadline - time.monotonic()
        if left <= 0 or _wake.is_set():
            return
        if ringable:
            if DOORBELL.wait(left):
                return
        elif _wake.wait(min(left, 0.5)):
            return

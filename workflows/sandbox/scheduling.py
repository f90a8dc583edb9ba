"""Who gets the next sandbox worker (FairQueue), and how much sandbox time one workflow run may use (RunBudget).

Both are thread-safe: the pool is used from event loops and from plain threads at once. Neither imports Django.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from .errors import budget_spent, busy


@dataclass(eq=False)
class _Waiter:
    owner: Hashable
    order: int
    wake: Callable[[], None]
    granted: bool = False


@dataclass
class FairQueue:
    """Grants of `slots` concurrent uses (one per worker), at most `per_owner` of them held by one owner.

    Contract:
    - `acquire_sync(owner)` / `await acquire_async(owner)` return once the caller holds a grant, or raise
      SandboxError("busy") after waiting `wait_s` for one. A holder calls `release(owner)` exactly once.
    - A free slot goes to the waiting owner holding the fewest grants (ties: whoever waits longest), and never
      to an owner already holding `per_owner`. So an owner holds more than its share only while nobody else
      waits, and once others wait, each freed slot goes to them first: one owner's queue of evaluations delays
      another owner's evaluation by at most the evaluations already running, whatever the queue's length.
    - A waiter that gives up (the wait limit, a cancellation) leaves no grant behind.
    """

    slots: int
    per_owner: int
    wait_s: float
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _held: dict[Hashable, int] = field(default_factory=dict, repr=False)
    _busy: int = field(default=0, repr=False)
    _waiters: list[_Waiter] = field(default_factory=list, repr=False)
    _order: itertools.count = field(default_factory=itertools.count, repr=False)

    def acquire_sync(self, owner: Hashable) -> None:
        event = threading.Event()
        waiter = self._enqueue(owner, event.set)
        if waiter.granted or event.wait(self.wait_s):
            return
        self._give_up(waiter, cancelled=False)

    async def acquire_async(self, owner: Hashable) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        waiter = self._enqueue(owner, lambda: loop.call_soon_threadsafe(_resolve, future))
        if waiter.granted:  # the common case: a slot was free, no hop through the loop
            return
        try:
            async with asyncio.timeout(self.wait_s):
                await future
        except TimeoutError:
            self._give_up(waiter, cancelled=False)
        except asyncio.CancelledError:
            self._give_up(waiter, cancelled=True)
            raise

    def release(self, owner: Hashable) -> None:
        with self._lock:
            self._busy -= 1
            self._held[owner] -= 1
            if not self._held[owner]:
                del self._held[owner]
            self._dispatch()

    def held(self) -> dict[Hashable, int]:
        """Grants held now, by owner (for tests and the benchmark)."""
        with self._lock:
            return dict(self._held)

    def waiting(self) -> int:
        with self._lock:
            return len(self._waiters)

    def _enqueue(self, owner: Hashable, wake: Callable[[], None]) -> _Waiter:
        with self._lock:
            waiter = _Waiter(owner, next(self._order), wake)
            self._waiters.append(waiter)
            self._dispatch()
            return waiter

    def _give_up(self, waiter: _Waiter, *, cancelled: bool) -> None:
        """The wait ended without the caller taking its grant: raise busy, or hand back a grant that came late."""
        with self._lock:
            if not waiter.granted:
                self._waiters.remove(waiter)
                if cancelled:
                    return
                raise busy(self.wait_s)
        if cancelled:  # granted meanwhile, but nobody will use it
            self.release(waiter.owner)
        # Not cancelled and granted meanwhile: the caller goes on with its grant.

    def _dispatch(self) -> None:
        """Hand free slots to waiters (the caller holds the lock)."""
        while self._busy < self.slots:
            eligible = [waiter for waiter in self._waiters if self._held.get(waiter.owner, 0) < self.per_owner]
            if not eligible:
                return
            chosen = min(eligible, key=lambda waiter: (self._held.get(waiter.owner, 0), waiter.order))
            self._waiters.remove(chosen)
            try:
                chosen.wake()
            except RuntimeError:  # its event loop was closed under it: nobody is left to take the grant
                continue
            self._busy += 1
            self._held[chosen.owner] = self._held.get(chosen.owner, 0) + 1
            chosen.granted = True


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class RunBudget:
    """The sandbox time one workflow run may use, retries included: the sum of its evaluations' time on a worker
    (time spent waiting for a worker is not counted).

    Contract: `limit_for(limit_s)` is the time limit the next evaluation gets (its own, or what is left of the
    budget if that is less), or raises SandboxError("budget") when nothing is left; `charge(used_s)` adds an
    evaluation's time. Evaluations of one run that are on workers at the same moment each get what was left when
    they started, so together they can pass the budget by at most one time limit each (the pool caps how many
    one owner runs at once).
    """

    def __init__(self, seconds: float) -> None:
        if seconds <= 0:
            raise ValueError("a run's sandbox budget must be positive")
        self.seconds = seconds
        self._spent = 0.0
        self._lock = threading.Lock()

    @property
    def spent(self) -> float:
        with self._lock:
            return self._spent

    def limit_for(self, limit_s: float) -> float:
        with self._lock:
            left = self.seconds - self._spent
        if left <= 0:
            raise budget_spent(self.seconds)
        return min(limit_s, left)

    def charge(self, used_s: float) -> None:
        with self._lock:
            self._spent += max(used_s, 0.0)

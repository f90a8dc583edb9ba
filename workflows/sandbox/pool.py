"""The pool of sandbox workers that runs workflow JavaScript: `code` bodies, `condition` expressions, compile checks."""

# Contract:
# - `sandbox_pool()` is this process's pool; `SandboxPool` is thread-safe, and its async methods run the blocking
#   pipe I/O in the pool's own threads (at most `size`), so no event loop ever blocks on a worker.
# - Workers start lazily, up to `size`, and belong to the pid that started them: after a fork the child drops the
#   parent's workers (closing its copies of their pipes, never signalling them) and starts its own.
# - An evaluation gives a JSON value (code), a bool (condition) or None / a message (compile), or raises
#   SandboxError. A worker that timed out, ran out of memory, died, spoke garbage or missed the deadline (time
#   limit + grace) is killed and replaced on the next checkout; the caller's process never fails with it.
# - A worker goes back to the pool only after its answer has been read in full. A cancelled async caller does not
#   change that: the pool thread finishes the round trip (bounded by the deadline), so no stale answer is ever
#   left in a pipe for the next caller. A caller cancelled while still waiting for a worker leaves nothing behind.
# - Fairness (scheduling.FairQueue): every evaluation carries an `owner` (a workflow's owner; None for compile
#   checks and callers without one). One owner holds at most `owner_workers` workers at once (default size - 1,
#   so one owner's runaway code never holds them all), a freed worker goes to the waiting owner holding the
#   fewest, and an evaluation that waits `queue_wait_s` for a worker fails with SandboxError("busy").
# - An evaluation may carry its run's RunBudget: it starts only while the run has sandbox time left, its time
#   limit is at most what is left, and its time on the worker is charged to the run ("budget" when spent).
# - Inputs cross as JSON (`json.dumps(allow_nan=False)`: a value JSON cannot carry raises TypeError/ValueError
#   here, in the caller's process).
#
# This module imports without Django; it reads the optional settings AGENTSITE_SANDBOX_WORKERS,
# AGENTSITE_SANDBOX_TIME_LIMIT_S, AGENTSITE_SANDBOX_MEMORY_MB, AGENTSITE_SANDBOX_OWNER_WORKERS,
# AGENTSITE_SANDBOX_QUEUE_WAIT_S and AGENTSITE_SANDBOX_RUN_BUDGET_S only when Django is configured.

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from agentsite.core import metrics

from .errors import SandboxError, budget_spent, error_from_answer
from .process import SandboxWorker, WorkerLost
from .scheduling import FairQueue, RunBudget

logger = logging.getLogger(__name__)

T = TypeVar("T")
START_TIMEOUT_S = 15.0  # a cold start is ~0.2 s; generous because test suites share 2 cores
GRACE_S = 1.0
CONTEXT_EVALUATIONS = 1000
QUEUE_WAIT_S = 10.0
RUN_BUDGET_S = 10.0
KINDS = ("code", "condition")

_pools: weakref.WeakSet[SandboxPool] = weakref.WeakSet()


class SandboxPool:
    """Up to `size` worker processes, each evaluation limited to `time_limit_s`, `memory_mb` of V8 heap and
    `output_cap_bytes` of result JSON; one owner holds at most `owner_workers` of them (default size - 1), and
    an evaluation waits at most `queue_wait_s` for one."""

    def __init__(
        self,
        size: int = 2,
        time_limit_s: float = 1.0,
        memory_mb: int = 64,
        output_cap_bytes: int = 1_000_000,
        *,
        owner_workers: int | None = None,
        queue_wait_s: float = QUEUE_WAIT_S,
        context_evaluations: int = CONTEXT_EVALUATIONS,
        grace_s: float = GRACE_S,
    ) -> None:
        if size < 1 or time_limit_s <= 0 or memory_mb < 8 or output_cap_bytes < 1 or queue_wait_s <= 0:
            raise ValueError("SandboxPool needs size >= 1, time_limit_s > 0, memory_mb >= 8, output_cap_bytes >= 1, "
                             "queue_wait_s > 0")
        self.size = size
        self.time_limit_s = time_limit_s
        self.memory_mb = memory_mb
        self.output_cap_bytes = output_cap_bytes
        self.owner_workers = min(size, owner_workers or max(1, size - 1))
        self.queue_wait_s = queue_wait_s
        self.context_evaluations = context_evaluations
        self.grace_s = grace_s
        self._reset()
        _pools.add(self)

    # --- the public API -------------------------------------------------------------------------------------
    # owner: whose evaluation this is (fair shares are per owner); budget: the run's sandbox time, if any.

    def run_code_sync(self, code: str, input: Any = None, context: Any = None, *, owner: Hashable = None,
                      budget: RunBudget | None = None) -> Any:
        """The JSON value returned by `code`, the body of function(input, context); None for undefined.
        Raises SandboxError."""
        message = _run_message("code", code, input, context)
        self._acquire_sync(owner, budget)
        return self._granted_run(owner, budget, message)["value"]

    def run_condition_sync(self, expression: str, input: Any = None, context: Any = None, *, owner: Hashable = None,
                           budget: RunBudget | None = None) -> bool:
        """The JavaScript truthiness of `expression`, with `input` and `context` in scope. Raises SandboxError."""
        message = _run_message("condition", expression, input, context)
        self._acquire_sync(owner, budget)
        return bool(self._granted_run(owner, budget, message)["flag"])

    def compile_problem_sync(self, source: str, *, kind: str = "code", owner: Hashable = None) -> str | None:
        """None if `source` compiles as a `kind` ("code" or "condition"), else the SyntaxError message.
        Never runs the code. Raises SandboxError for a sandbox failure (not for bad code)."""
        _check_kind(kind)
        self._acquire_sync(owner, None)
        return self._granted_compile(owner, source, kind)

    async def run_code(self, code: str, input: Any = None, context: Any = None, *, owner: Hashable = None,
                       budget: RunBudget | None = None) -> Any:
        message = _run_message("code", code, input, context)
        return (await self._granted_in_pool_thread(owner, budget, self._granted_run, owner, budget, message))["value"]

    async def run_condition(self, expression: str, input: Any = None, context: Any = None, *, owner: Hashable = None,
                            budget: RunBudget | None = None) -> bool:
        message = _run_message("condition", expression, input, context)
        return bool((await self._granted_in_pool_thread(owner, budget, self._granted_run, owner, budget,
                                                        message))["flag"])

    async def compile_problem(self, source: str, *, kind: str = "code", owner: Hashable = None) -> str | None:
        _check_kind(kind)
        return await self._granted_in_pool_thread(owner, None, self._granted_compile, owner, source, kind)

    def close(self) -> None:
        """Kill every worker of this process (busy ones included: their callers get `crashed`). The pool stays
        usable and starts workers again on demand."""
        with self._condition:
            workers = list(self._workers)
            self._workers.clear()
            self._idle.clear()
            executor, self._executor = self._executor, None
            self._condition.notify_all()
        for worker in workers:
            worker.kill()
        if executor is not None:
            executor.shutdown(wait=False)

    def worker_pids(self) -> list[int]:
        """The pids of this process's live workers (for tests and the benchmark)."""
        with self._condition:
            return sorted(worker.pid for worker in self._workers)

    # --- evaluation: the caller holds a grant of `self.queue`, which these give back -----------------------------

    def _granted_run(self, owner: Hashable, budget: RunBudget | None, message: dict[str, Any]) -> dict[str, Any]:
        try:
            limit = budget.limit_for(self.time_limit_s) if budget else self.time_limit_s
            if limit < self.time_limit_s:
                message = {**message, "time_limit_s": limit}
            try:
                answer = self._round_trip(message, limit, budget)
            except SandboxError as error:
                raise _as_budget_error(error, limit < self.time_limit_s, budget) from None
        finally:
            self.queue.release(owner)
        if not answer.get("ok"):
            raise _as_budget_error(self._failure(answer), limit < self.time_limit_s, budget)
        return answer

    def _granted_compile(self, owner: Hashable, source: str, kind: str) -> str | None:
        try:
            answer = self._round_trip({"op": "compile", "kind": kind, "source": source}, self.time_limit_s)
        finally:
            self.queue.release(owner)
        if not answer.get("ok"):  # a worker that failed rather than compiled: a sandbox failure, not bad code
            raise self._failure(answer)
        return answer["problem"]

    def _failure(self, answer: dict[str, Any]) -> SandboxError:
        return error_from_answer(
            str(answer.get("kind")), str(answer.get("message", "")), time_limit_s=self.time_limit_s,
            memory_mb=self.memory_mb, output_cap_bytes=self.output_cap_bytes,
        )

    def _round_trip(self, message: dict[str, Any], limit_s: float, budget: RunBudget | None = None) -> dict[str, Any]:
        """One request on a worker; `budget` is charged the request's time only (not a worker's start or reaping)."""
        worker = self._checkout()
        keep = False
        started = time.monotonic()
        try:
            answer = worker.request(message, deadline=started + limit_s + self.grace_s)
            keep = not answer.get("retire", True)
            return answer
        except WorkerLost as lost:
            raise self._lost_error(lost, worker) from None
        finally:
            if budget is not None:
                budget.charge(time.monotonic() - started)
            self._checkin(worker, keep=keep)

    def _lost_error(self, lost: WorkerLost, worker: SandboxWorker) -> SandboxError:
        if lost.timed_out:
            logger.warning("sandbox worker %s missed its deadline; killing it", worker.pid)
            return error_from_answer("timeout", "", time_limit_s=self.time_limit_s, memory_mb=self.memory_mb,
                                     output_cap_bytes=self.output_cap_bytes)
        logger.warning("sandbox worker %s lost: %s", worker.pid, lost.reason)
        return SandboxError("crashed", f"The JavaScript sandbox stopped unexpectedly ({lost.reason}); try again.")

    def _acquire_sync(self, owner: Hashable, budget: RunBudget | None) -> None:
        self._ensure_own_process()
        if budget:
            budget.limit_for(self.time_limit_s)  # a spent run does not queue
        self.queue.acquire_sync(owner)

    async def _granted_in_pool_thread(self, owner: Hashable, budget: RunBudget | None, function: Callable[..., T],
                                      *args: Any) -> T:
        """Wait for a grant on this loop (no thread is held while waiting), then run `function`, which releases
        the grant, in a pool thread. Once granted the call runs to its end even if this caller is cancelled."""
        self._ensure_own_process()
        if budget:
            budget.limit_for(self.time_limit_s)  # a spent run does not queue
        await self.queue.acquire_async(owner)
        try:
            future = self._executor_here().submit(function, *args)
        except BaseException:
            self.queue.release(owner)
            raise
        running = asyncio.wrap_future(future)
        # A cancelled caller leaves the call's outcome to nobody: read it, or asyncio logs an error the call
        # already reported to its run (a spent budget, a timeout) as "Future exception was never retrieved".
        running.add_done_callback(_read_outcome)
        return await asyncio.shield(running)

    # --- workers --------------------------------------------------------------------------------------------

    def _checkout(self) -> SandboxWorker:
        """An idle worker, or a new one: the caller's grant guarantees room (grants <= size)."""
        self._ensure_own_process()
        with self._condition:
            while not self._idle and len(self._workers) + self._starting >= self.size:
                self._condition.wait()  # only a worker closed by close() and not yet reaped
            if self._idle:
                worker = self._idle.pop()
                self._publish()
                return worker
            self._starting += 1
        worker = None
        try:
            worker = SandboxWorker.start(self._worker_config(), timeout_s=START_TIMEOUT_S)
        except WorkerLost as lost:
            logger.error("sandbox worker failed to start: %s", lost.reason)
            raise SandboxError("crashed", f"The JavaScript sandbox could not start ({lost.reason}).") from None
        finally:
            with self._condition:
                self._starting -= 1
                if worker is not None:
                    self._workers.add(worker)
                    self._publish()
                self._condition.notify()
        return worker

    def _checkin(self, worker: SandboxWorker, *, keep: bool) -> None:
        with self._condition:
            # A worker closed by close() meanwhile is no longer ours to keep.
            keep = keep and worker in self._workers
            if keep:
                self._idle.append(worker)
            else:
                self._workers.discard(worker)
            self._publish()
            self._condition.notify()
        if not keep:
            worker.kill()

    def _publish(self) -> None:
        """agentsite_sandbox_workers{state}: this process's workers, idle and busy (under the condition)."""
        if metrics.ENABLED:
            metrics.sandbox_workers(idle=len(self._idle), busy=len(self._workers) - len(self._idle))

    def _worker_config(self) -> dict[str, Any]:
        return {"memory_mb": self.memory_mb, "time_limit_s": self.time_limit_s,
                "output_cap_bytes": self.output_cap_bytes, "context_evaluations": self.context_evaluations}

    def _executor_here(self) -> ThreadPoolExecutor:
        self._ensure_own_process()
        with self._condition:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=self.size, thread_name_prefix="sandbox")
            return self._executor

    # --- process ownership ----------------------------------------------------------------------------------

    def _reset(self) -> None:
        """Fresh, empty state owned by the current pid (locks included: a fork can copy one held)."""
        self._pid = os.getpid()
        self._condition = threading.Condition()
        self._workers: set[SandboxWorker] = set()
        self._idle: list[SandboxWorker] = []
        self._starting = 0
        self._executor: ThreadPoolExecutor | None = None
        self.queue = FairQueue(self.size, self.owner_workers, self.queue_wait_s)

    def _ensure_own_process(self) -> None:
        if self._pid != os.getpid():
            self._drop_inherited_workers()

    def _drop_inherited_workers(self) -> None:
        # The workers are the parent's: close our copies of their pipes, never signal them.
        for worker in list(self._workers):
            worker.forget()
        self._reset()


def _read_outcome(done: asyncio.Future[Any]) -> None:
    if not done.cancelled():
        done.exception()


def _run_message(kind: str, source: str, input: Any, context: Any) -> dict[str, Any]:
    return {"op": "run", "kind": kind, "source": source,
            "input": json.dumps(input, allow_nan=False), "context": json.dumps(context, allow_nan=False)}


def _as_budget_error(error: SandboxError, cut_by_budget: bool, budget: RunBudget | None) -> SandboxError:
    """A timeout under a limit the budget lowered is the budget's doing: say so, and do not invite a retry."""
    if cut_by_budget and budget is not None and error.kind == "timeout":
        return budget_spent(budget.seconds)
    return error


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")


_process_pool: SandboxPool | None = None
_process_pool_lock = threading.Lock()


def sandbox_pool() -> SandboxPool:
    """This process's pool, built on first use from the optional Django settings."""
    global _process_pool
    with _process_pool_lock:
        if _process_pool is None:
            _process_pool = SandboxPool(**_configured_arguments())
        return _process_pool


def _configured_arguments() -> dict[str, Any]:
    try:
        # Django is optional here: the pool also runs outside a configured project (the sandbox's own tests).
        from django.conf import settings
    except ImportError:
        return {}
    if not settings.configured:
        return {}
    return {
        "size": int(getattr(settings, "AGENTSITE_SANDBOX_WORKERS", 2)),
        "time_limit_s": float(getattr(settings, "AGENTSITE_SANDBOX_TIME_LIMIT_S", 1.0)),
        "memory_mb": int(getattr(settings, "AGENTSITE_SANDBOX_MEMORY_MB", 64)),
        "owner_workers": getattr(settings, "AGENTSITE_SANDBOX_OWNER_WORKERS", None),
        "queue_wait_s": float(getattr(settings, "AGENTSITE_SANDBOX_QUEUE_WAIT_S", QUEUE_WAIT_S)),
    }


def run_budget() -> RunBudget:
    """A new run's sandbox budget: AGENTSITE_SANDBOX_RUN_BUDGET_S when Django is configured, else the default."""
    seconds = RUN_BUDGET_S
    try:
        # Django is optional here: the pool also runs outside a configured project (the sandbox's own tests).
        from django.conf import settings
    except ImportError:
        return RunBudget(seconds)
    if settings.configured:
        seconds = float(getattr(settings, "AGENTSITE_SANDBOX_RUN_BUDGET_S", RUN_BUDGET_S))
    return RunBudget(seconds)


def _after_fork_in_child() -> None:
    global _process_pool_lock
    _process_pool_lock = threading.Lock()
    for pool in list(_pools):
        pool._drop_inherited_workers()


def _close_all() -> None:
    for pool in list(_pools):
        if pool._pid == os.getpid():
            pool.close()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_all)

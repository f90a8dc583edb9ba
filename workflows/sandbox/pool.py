"""The pool of sandbox workers that runs workflow JavaScript: `code` bodies, `condition` expressions, compile checks.

Contract:
- `sandbox_pool()` is this process's pool; `SandboxPool` is thread-safe, and its async methods run the blocking
  pipe I/O in the pool's own threads (at most `size`), so no event loop ever blocks on a worker.
- Workers start lazily, up to `size`, and belong to the pid that started them: after a fork the child drops the
  parent's workers (closing its copies of their pipes, never signalling them) and starts its own.
- An evaluation gives a JSON value (code), a bool (condition) or None / a message (compile), or raises
  SandboxError. A worker that timed out, ran out of memory, died, spoke garbage or missed the deadline (time
  limit + grace) is killed and replaced on the next checkout; the caller's process never fails with it.
- A worker goes back to the pool only after its answer has been read in full. A cancelled async caller does not
  change that: the pool thread finishes the round trip (bounded by the deadline), so no stale answer is ever
  left in a pipe for the next caller.
- Inputs cross as JSON (`json.dumps(allow_nan=False)`: a value JSON cannot carry raises TypeError/ValueError
  here, in the caller's process).

This module imports without Django; it reads the optional settings AGENTSITE_SANDBOX_WORKERS,
AGENTSITE_SANDBOX_TIME_LIMIT_S and AGENTSITE_SANDBOX_MEMORY_MB only when Django is configured.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from .errors import SandboxError, error_from_answer
from .process import SandboxWorker, WorkerLost

logger = logging.getLogger(__name__)

T = TypeVar("T")
START_TIMEOUT_S = 15.0  # a cold start is ~0.2 s; generous because test suites share 2 cores
GRACE_S = 1.0
CONTEXT_EVALUATIONS = 1000
KINDS = ("code", "condition")

_pools: weakref.WeakSet[SandboxPool] = weakref.WeakSet()


class SandboxPool:
    """Up to `size` worker processes, each evaluation limited to `time_limit_s`, `memory_mb` of V8 heap and
    `output_cap_bytes` of result JSON."""

    def __init__(
        self,
        size: int = 2,
        time_limit_s: float = 1.0,
        memory_mb: int = 64,
        output_cap_bytes: int = 1_000_000,
        *,
        context_evaluations: int = CONTEXT_EVALUATIONS,
        grace_s: float = GRACE_S,
    ) -> None:
        if size < 1 or time_limit_s <= 0 or memory_mb < 8 or output_cap_bytes < 1:
            raise ValueError("SandboxPool needs size >= 1, time_limit_s > 0, memory_mb >= 8, output_cap_bytes >= 1")
        self.size = size
        self.time_limit_s = time_limit_s
        self.memory_mb = memory_mb
        self.output_cap_bytes = output_cap_bytes
        self.context_evaluations = context_evaluations
        self.grace_s = grace_s
        self._reset()
        _pools.add(self)

    # --- the public API -------------------------------------------------------------------------------------

    def run_code_sync(self, code: str, input: Any = None, context: Any = None) -> Any:
        """The JSON value returned by `code`, the body of function(input, context); None for undefined.
        Raises SandboxError."""
        return self._run("code", code, input, context)["value"]

    def run_condition_sync(self, expression: str, input: Any = None, context: Any = None) -> bool:
        """The JavaScript truthiness of `expression`, with `input` and `context` in scope. Raises SandboxError."""
        return bool(self._run("condition", expression, input, context)["flag"])

    def compile_problem_sync(self, source: str, *, kind: str = "code") -> str | None:
        """None if `source` compiles as a `kind` ("code" or "condition"), else the SyntaxError message.
        Never runs the code. Raises SandboxError for a sandbox failure (not for bad code)."""
        _check_kind(kind)
        answer = self._round_trip({"op": "compile", "kind": kind, "source": source})
        if not answer.get("ok"):  # a worker that failed rather than compiled: a sandbox failure, not bad code
            raise self._failure(answer)
        return answer["problem"]

    async def run_code(self, code: str, input: Any = None, context: Any = None) -> Any:
        return await self._in_pool_thread(self.run_code_sync, code, input, context)

    async def run_condition(self, expression: str, input: Any = None, context: Any = None) -> bool:
        return await self._in_pool_thread(self.run_condition_sync, expression, input, context)

    async def compile_problem(self, source: str, *, kind: str = "code") -> str | None:
        return await self._in_pool_thread(functools.partial(self.compile_problem_sync, source, kind=kind))

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

    def debug_worker(self) -> dict[str, Any]:
        """A worker's own view of itself: environment, loaded modules, resource limits (for tests)."""
        return self._round_trip({"op": "debug", "source": ""})

    # --- evaluation -----------------------------------------------------------------------------------------

    def _run(self, kind: str, source: str, input: Any, context: Any) -> dict[str, Any]:
        message = {
            "op": "run", "kind": kind, "source": source,
            "input": json.dumps(input, allow_nan=False), "context": json.dumps(context, allow_nan=False),
        }
        answer = self._round_trip(message)
        if not answer.get("ok"):
            raise self._failure(answer)
        return answer

    def _failure(self, answer: dict[str, Any]) -> SandboxError:
        return error_from_answer(
            str(answer.get("kind")), str(answer.get("message", "")), time_limit_s=self.time_limit_s,
            memory_mb=self.memory_mb, output_cap_bytes=self.output_cap_bytes,
        )

    def _round_trip(self, message: dict[str, Any]) -> dict[str, Any]:
        worker = self._checkout()
        keep = False
        try:
            answer = worker.request(message, deadline=time.monotonic() + self.time_limit_s + self.grace_s)
            keep = not answer.get("retire", True)
            return answer
        except WorkerLost as lost:
            raise self._lost_error(lost, worker) from None
        finally:
            self._checkin(worker, keep=keep)

    def _lost_error(self, lost: WorkerLost, worker: SandboxWorker) -> SandboxError:
        if lost.timed_out:
            logger.warning("sandbox worker %s missed its deadline; killing it", worker.pid)
            return error_from_answer("timeout", "", time_limit_s=self.time_limit_s, memory_mb=self.memory_mb,
                                     output_cap_bytes=self.output_cap_bytes)
        logger.warning("sandbox worker %s lost: %s", worker.pid, lost.reason)
        return SandboxError("crashed", f"The JavaScript sandbox stopped unexpectedly ({lost.reason}); try again.")

    async def _in_pool_thread(self, function: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor_here(), functools.partial(function, *args))

    # --- workers --------------------------------------------------------------------------------------------

    def _checkout(self) -> SandboxWorker:
        self._ensure_own_process()
        with self._condition:
            while not self._idle and len(self._workers) + self._starting >= self.size:
                self._condition.wait()
            if self._idle:
                return self._idle.pop()
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
            self._condition.notify()
        if not keep:
            worker.kill()

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

    def _ensure_own_process(self) -> None:
        if self._pid != os.getpid():
            self._drop_inherited_workers()

    def _drop_inherited_workers(self) -> None:
        # The workers are the parent's: close our copies of their pipes, never signal them.
        for worker in list(self._workers):
            worker.forget()
        self._reset()


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
        from django.conf import settings
    except ImportError:
        return {}
    if not settings.configured:
        return {}
    return {
        "size": int(getattr(settings, "AGENTSITE_SANDBOX_WORKERS", 2)),
        "time_limit_s": float(getattr(settings, "AGENTSITE_SANDBOX_TIME_LIMIT_S", 1.0)),
        "memory_mb": int(getattr(settings, "AGENTSITE_SANDBOX_MEMORY_MB", 64)),
    }


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

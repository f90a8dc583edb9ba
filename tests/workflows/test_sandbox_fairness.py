"""Fairness of the sandbox between owners: shares of the workers, the order waiters are served in, the queue-wait
limit, and a run's budget of sandbox time (retries included)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from tests.workflows.conftest import graph, node
from tests.workflows.test_sandbox import wait_for
from workflows.engine import Execution
from workflows.graph import Graph
from workflows.nodes import RunContext
from workflows.sandbox import RunBudget, SandboxError, SandboxPool
from workflows.sandbox import pool as pool_module
from workflows.sandbox.process import SandboxWorker, WorkerLost
from workflows.sandbox.scheduling import FairQueue

SPIN = "while (true) {}"


def acquire_in_thread(queue: FairQueue, owner: str, granted: list[str]) -> threading.Thread:
    def acquire() -> None:
        queue.acquire_sync(owner)
        granted.append(owner)

    thread = threading.Thread(target=acquire, daemon=True)
    thread.start()
    return thread


# --- who gets a worker ----------------------------------------------------------------------------------------


def test_a_freed_slot_goes_to_the_waiting_owner_holding_the_fewest() -> None:
    queue = FairQueue(slots=2, per_owner=2, wait_s=5)
    queue.acquire_sync("a")
    queue.acquire_sync("a")
    granted: list[str] = []
    acquire_in_thread(queue, "a", granted)  # a's third, first in line
    wait_for(lambda: queue.waiting() == 1, "a's third evaluation waiting")
    b = acquire_in_thread(queue, "b", granted)
    wait_for(lambda: queue.waiting() == 2, "b's evaluation waiting")
    queue.release("a")
    b.join(timeout=5)
    assert granted == ["b"], "b holds nothing and must be served before a's third, which came first"
    assert queue.held() == {"a": 1, "b": 1} and queue.waiting() == 1
    queue.release("b")
    wait_for(lambda: granted == ["b", "a"], "a's third evaluation being served once b's slot is free")


def test_one_owner_never_holds_more_than_its_share_even_with_a_slot_free() -> None:
    queue = FairQueue(slots=2, per_owner=1, wait_s=5)
    queue.acquire_sync("a")
    granted: list[str] = []
    acquire_in_thread(queue, "a", granted)
    wait_for(lambda: queue.waiting() == 1, "a's second evaluation waiting")
    queue.acquire_sync("b")  # the free slot: b gets it at once
    assert queue.held() == {"a": 1, "b": 1} and granted == []
    queue.release("a")
    wait_for(lambda: granted == ["a"], "a's second evaluation being served once a's first is done")


def test_a_wait_past_the_limit_fails_busy_and_leaves_nothing_behind() -> None:
    queue = FairQueue(slots=1, per_owner=1, wait_s=0.2)
    queue.acquire_sync("a")
    with pytest.raises(SandboxError) as caught:
        queue.acquire_sync("b")
    assert caught.value.kind == "busy" and caught.value.retryable
    assert "0.2 s" in caught.value.message
    assert queue.waiting() == 0 and queue.held() == {"a": 1}
    queue.release("a")
    queue.acquire_sync("b")
    assert queue.held() == {"b": 1}


async def test_a_cancelled_async_waiter_leaves_nothing_behind() -> None:
    queue = FairQueue(slots=1, per_owner=1, wait_s=5)
    await queue.acquire_async("a")
    waiting = asyncio.create_task(queue.acquire_async("b"))
    await asyncio.to_thread(wait_for, lambda: queue.waiting() == 1, "b waiting")
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert queue.waiting() == 0 and queue.held() == {"a": 1}
    queue.release("a")
    await queue.acquire_async("c")
    assert queue.held() == {"c": 1}


# --- the pool -------------------------------------------------------------------------------------------------


@pytest.fixture
def pair() -> Iterator[SandboxPool]:
    pool = SandboxPool(size=2, time_limit_s=5, grace_s=1)
    yield pool
    pool.close()


async def test_a_flood_of_runaway_code_does_not_hold_every_worker(pair: SandboxPool) -> None:
    flood = [asyncio.create_task(pair.run_code(SPIN, owner="a")) for _ in range(8)]
    await asyncio.to_thread(wait_for, lambda: pair.queue.held() == {"a": 1} and pair.queue.waiting() == 7,
                            "a holding one worker and seven of its evaluations waiting")
    assert await pair.run_code("return input * 2", input=21, owner="b") == 42
    assert await pair.run_condition("input === 'x'", input="x", owner="b") is True
    assert not any(task.done() for task in flood), "b was served while a's first evaluation was still running"
    for task in flood:
        task.cancel()
    await asyncio.gather(*flood, return_exceptions=True)


def test_an_evaluation_that_waits_too_long_for_a_worker_fails_busy() -> None:
    pool = SandboxPool(size=1, time_limit_s=5, queue_wait_s=0.3)
    try:
        ended: list[str] = []

        def hold() -> None:
            try:
                pool.run_code_sync(SPIN, owner="a")
            except SandboxError as error:
                ended.append(error.kind)

        holder = threading.Thread(target=hold)
        holder.start()
        wait_for(lambda: pool.queue.held() == {"a": 1}, "a holding the only worker")
        with pytest.raises(SandboxError) as caught:
            pool.run_code_sync("return 1", owner="b")
        assert caught.value.kind == "busy"
        pool.close()  # a's evaluation ends with an error
        holder.join(timeout=10)
        assert len(ended) == 1, "a's evaluation must have ended with a SandboxError"
        assert pool.run_code_sync("return 'served'", owner="b") == "served"
    finally:
        pool.close()


@pytest.mark.e2e
def test_a_read_whose_pipe_the_pool_closed_meanwhile_is_a_lost_worker_not_an_os_error() -> None:
    """pool.close() from another thread closes a busy worker's pipes and kills it: the caller blocked reading its
    answer then reads a closed descriptor. That is the worker lost (a SandboxError to the caller), never an
    OSError escaping the evaluation (seen in CI: EBADF in the holder's thread)."""
    popen = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.stdin.readline(); time.sleep(30)"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    worker = SandboxWorker(popen)
    raised: list[BaseException] = []

    def ask() -> None:
        try:
            worker.request({"op": "run"}, deadline=time.monotonic() + 20)
        except BaseException as exc:  # noqa: BLE001 - what escapes is the point
            raised.append(exc)

    asker = threading.Thread(target=ask)
    asker.start()
    time.sleep(0.3)  # blocked in select on the answer
    worker.forget()  # what the pool's close does to its end of the pipes, between the select and the read
    popen.kill()  # the end of the pipe: the select returns, the read meets the closed descriptor
    asker.join(10)
    popen.wait(10)
    assert len(raised) == 1 and isinstance(raised[0], WorkerLost), raised
    with pytest.raises(WorkerLost):
        worker.request({"op": "run"}, deadline=time.monotonic() + 1)  # its file closed too: still lost


# --- a run's budget -------------------------------------------------------------------------------------------


def test_the_budget_lowers_the_last_evaluations_limit_and_then_refuses() -> None:
    pool = SandboxPool(size=1, time_limit_s=5)
    budget = RunBudget(0.3)
    try:
        with pytest.raises(SandboxError) as caught:
            pool.run_code_sync(SPIN, budget=budget)  # its limit is the 0.3 s left, not the pool's 5 s
        assert caught.value.kind == "budget" and not caught.value.retryable
        assert budget.spent >= 0.3
        with pytest.raises(SandboxError) as caught:
            pool.run_code_sync("return 1", budget=budget)
        assert caught.value.kind == "budget"
        assert pool.run_code_sync("return 'another run'", budget=RunBudget(0.3)) == "another run"
    finally:
        pool.close()


async def test_a_runs_retries_stop_when_its_sandbox_budget_is_spent(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = SandboxPool(size=2, time_limit_s=0.2, grace_s=1)
    monkeypatch.setattr(pool_module, "_process_pool", pool)
    spinners = [node(f"spin{i}", "code", code=SPIN, retry={"max": 10}) for i in range(8)]
    data = graph(node("in", "input"), *spinners, edges=[("in", f"spin{i}") for i in range(8)])
    ctx = RunContext(input="x", owner_id="a", emit=lambda kind, payload: None, sandbox_budget=RunBudget(1.0))
    try:
        execution = Execution(Graph.from_dict(data), ctx)
        assert await execution.run() == "error"
    finally:
        pool.close()
    assert "sandbox time" in execution.error.message
    attempts = sum(entry.attempts for entry in execution.trace)
    assert attempts < 8 * 11, "attempts after the budget was spent must not run"
    # Each evaluation gets at most what is left when it starts, so the overrun is one limit per worker held.
    assert 1.0 <= ctx.sandbox_budget.spent <= 1.0 + pool.owner_workers * (0.2 + pool.grace_s)


async def test_a_code_node_passes_its_runs_owner_to_the_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = SandboxPool(size=2, time_limit_s=5)
    monkeypatch.setattr(pool_module, "_process_pool", pool)
    owners: list[dict] = []
    data = graph(node("in", "input"), node("spin", "code", code=SPIN), edges=[("in", "spin")])
    ctx = RunContext(input="x", owner_id=41, emit=lambda kind, payload: None)
    try:
        running = asyncio.create_task(Execution(Graph.from_dict(data), ctx).run())
        await asyncio.to_thread(wait_for, lambda: owners.append(pool.queue.held()) or owners[-1] == {41: 1},
                                "the run's evaluation held under its owner's id")
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    finally:
        pool.close()

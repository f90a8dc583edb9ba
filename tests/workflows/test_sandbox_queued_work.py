"""Work an evaluation leaves queued in V8 (promise jobs, async functions, `await`) counts against its own limit.

V8 runs microtasks after the evaluation that queued them has returned its value; these tests prove that such
work cannot outlive its evaluation: it finishes within the limit, or the evaluation fails with `timeout` and
its worker is replaced, so the next evaluation, whoever runs it, finds an idle worker.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from tests.workflows.conftest import graph, node
from tests.workflows.test_sandbox import process_state, wait_for
from workflows.sandbox import SandboxError, SandboxPool
from workflows.sandbox import pool as pool_module

TIME_LIMIT_S = 0.5

ENDLESS_CODE = [
    "function l() { Promise.resolve().then(l); } l(); return 'x'",
    "(async function l() { await null; return l(); })(); return 'x'",
    "(async () => { for (;;) { await 0; } })(); return 'x'",
    "Promise.resolve({then(resolve) { Promise.resolve(this).then(resolve); }}); return 'x'",
    "const p = Promise.reject(new Error('e')); (function l() { p.catch(l); })(); return 'x'",
    "async function* g() { for (;;) yield 1; } (async () => { for await (const _ of g()) {} })(); return 'x'",
]
ENDLESS_CONDITION = [
    "(Promise.resolve().then(function l() { Promise.resolve().then(l); }), true)",
    "((async () => { for (;;) { await 0; } })(), false)",
]


@pytest.fixture
def single() -> Iterator[SandboxPool]:
    pool = SandboxPool(size=1, time_limit_s=TIME_LIMIT_S)
    yield pool
    pool.close()


def assert_replaced_and_serving(pool: SandboxPool, pid: int) -> None:
    wait_for(lambda: process_state(pid) in (None, "Z"), f"the worker {pid} that held endless queued work exiting")
    assert pool.run_code_sync("return input + 1", input=1) == 2
    assert pool.worker_pids() != [pid]


@pytest.mark.parametrize("code", ENDLESS_CODE)
def test_endless_queued_work_of_a_code_node_times_out_and_dies_with_its_worker(single: SandboxPool, code: str) -> None:
    single.run_code_sync("return 0")
    [pid] = single.worker_pids()
    with pytest.raises(SandboxError) as caught:
        single.run_code_sync(code)
    # Chains that allocate as they go (async recursion, a self-resolving thenable) may reach the heap limit
    # before the time limit, depending on the machine's speed: either limit stops them, never "success".
    assert caught.value.kind in ("timeout", "memory")
    assert_replaced_and_serving(single, pid)


@pytest.mark.parametrize("expression", ENDLESS_CONDITION)
def test_endless_queued_work_of_a_condition_times_out_too(single: SandboxPool, expression: str) -> None:
    single.run_code_sync("return 0")
    [pid] = single.worker_pids()
    with pytest.raises(SandboxError) as caught:
        single.run_condition_sync(expression)
    assert caught.value.kind == "timeout"
    assert_replaced_and_serving(single, pid)


def test_queued_work_that_ends_within_the_limit_keeps_the_worker(single: SandboxPool) -> None:
    single.run_code_sync("return 0")
    [pid] = single.worker_pids()
    code = "let n = 0; (async () => { while (n < 1000) { n++; await 0; } })(); return 'done'"
    assert single.run_code_sync(code) == "done"
    assert single.run_condition_sync("(Promise.resolve().then(() => 1), true)") is True
    assert single.worker_pids() == [pid]


def test_compile_checks_answer_after_an_evaluation_that_left_endless_work(single: SandboxPool) -> None:
    with pytest.raises(SandboxError):
        single.run_code_sync(ENDLESS_CODE[0])
    assert single.compile_problem_sync("return 1") is None
    assert "SyntaxError" in single.compile_problem_sync("return {")


@pytest.mark.django_db(transaction=True)
def test_saving_a_workflow_after_endless_queued_work_answers_normally(owner_client, single: SandboxPool,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool_module, "_process_pool", single)
    with pytest.raises(SandboxError):
        single.run_code_sync(ENDLESS_CODE[0])
    data = graph(node("in", "input"), node("double", "code", code="return input * 2"), node("out", "output"),
                 edges=[("in", "double"), ("double", "out")])
    response = owner_client.post("/api/workflows", {"name": "after-poison", **data}, format="json")
    assert response.status_code == 201, response.content


@pytest.mark.django_db(transaction=True)
def test_a_worker_that_cannot_answer_a_save_is_a_503_in_the_envelope(owner_client,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    stuck = SandboxPool(size=1, time_limit_s=0.2, grace_s=0.3)
    monkeypatch.setattr(pool_module, "_process_pool", stuck)
    try:
        stuck.run_code_sync("return 1")
        [pid] = stuck.worker_pids()
        os.kill(pid, signal.SIGSTOP)  # it cannot answer the compile check at all
        data = graph(node("in", "input"), node("double", "code", code="return input * 2"), edges=[("in", "double")])
        response = owner_client.post("/api/workflows", {"name": "stuck", **data}, format="json")
    finally:
        stuck.close()
    assert response.status_code == 503, response.content
    assert response.json()["error"]["code"] == "unavailable"


def test_queued_work_stopped_by_the_heap_limit_is_a_memory_error_not_a_success() -> None:
    # With time to spare, the chain's promises fill the heap first: V8 stops the queued work there, and the
    # evaluation must not be answered as if it had finished (it was, before: 'x', and the worker kept).
    pool = SandboxPool(size=1, time_limit_s=30, memory_mb=16)
    try:
        with pytest.raises(SandboxError) as caught:
            pool.run_code_sync("(async function l() { await null; return l(); })(); return 'x'")
        assert caught.value.kind == "memory"
        assert pool.run_code_sync("return 1") == 1
    finally:
        pool.close()

"""The JavaScript sandbox with real worker processes: values, errors, limits, isolation, concurrency, lifecycle."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from workflows.sandbox import SandboxError, SandboxPool, sandbox_pool
from workflows.sandbox.pool import _configured_arguments

ROOT = Path(__file__).resolve().parents[2]
TIME_LIMIT_S = 0.5
GRACE_S = 1.0
HOST_NAMES = ["require", "process", "fetch", "XMLHttpRequest", "setTimeout", "setInterval", "clearTimeout",
              "__timer_manager", "WebAssembly", "SharedArrayBuffer", "Atomics", "FinalizationRegistry", "WeakRef",
              "module", "exports", "Deno", "Bun", "navigator", "window", "importScripts"]


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    pool = SandboxPool(size=2, time_limit_s=TIME_LIMIT_S, grace_s=GRACE_S)
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def single() -> Iterator[SandboxPool]:
    """One worker, so that consecutive evaluations share a worker and its V8 context."""
    pool = SandboxPool(size=1, time_limit_s=TIME_LIMIT_S, grace_s=GRACE_S)
    yield pool
    pool.close()


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"within {timeout_s} s: {what} did not happen")
        time.sleep(0.01)


def process_state(pid: int, proc: Path = Path("/proc")) -> str | None:
    """The state letter of /proc/<pid>/stat (R running, S sleeping, Z zombie), None if gone."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except FileNotFoundError:
        return None
    return stat.rpartition(")")[2].split()[0]


def is_running(pid: int) -> bool:
    """Some thread of `pid` is on a CPU (V8 runs on a thread of its own, not the main one)."""
    tasks = Path(f"/proc/{pid}/task")
    return any(process_state(int(task.name), tasks) == "R" for task in tasks.iterdir())


def sandbox_children() -> set[int]:
    """Live (not zombie) worker processes whose parent is this test process."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        if int(fields[1]) == os.getpid() and fields[0] != "Z" and b"sandbox/worker.py" in cmdline:
            found.add(int(entry.name))
    return found


def error_of(pool: SandboxPool, code: str, **kwargs: object) -> SandboxError:
    with pytest.raises(SandboxError) as caught:
        pool.run_code_sync(code, **kwargs)
    return caught.value


# --- values -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("return {a: 1, b: [true, null], c: 'x'}", {"a": 1, "b": [True, None], "c": "x"}),
        ("return [1, 'two', {three: 3}]", [1, "two", {"three": 3}]),
        ("return 6 * 7", 42),
        ("return 1.5", 1.5),
        ("return 'héllo ✓'", "héllo ✓"),
        ("return null", None),
        ("return undefined", None),
        ("", None),
        ("return false", False),
    ],
)
async def test_code_body_returns_its_json_value(pool: SandboxPool, code: str, expected: object) -> None:
    assert await pool.run_code(code) == expected


async def test_code_sees_input_and_context_as_fresh_json(pool: SandboxPool) -> None:
    context = {"input": "hi", "outputs": {"fetch": {"items": [1, 2, 3]}}}
    code = "input.n += 1; return {n: input.n, total: context.outputs.fetch.items.reduce((a, b) => a + b, 0)}"
    assert await pool.run_code(code, input={"n": 1}, context=context) == {"n": 2, "total": 6}
    assert context == {"input": "hi", "outputs": {"fetch": {"items": [1, 2, 3]}}}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("input.n > 1", True), ("input.n > 5", False), ("input.text", True), ("''", False), ("0", False),
        ("'0'", True), ("[]", True), ("({})", True), ("null", False), ("undefined", False), ("NaN", False),
        ("context.outputs.check === 'ok'", True),
    ],
)
async def test_condition_follows_javascript_truthiness(pool: SandboxPool, expression: str, expected: bool) -> None:
    flag = await pool.run_condition(expression, input={"n": 2, "text": "x"}, context={"outputs": {"check": "ok"}})
    assert flag is expected


def test_documented_json_edge_cases_follow_json_stringify(pool: SandboxPool) -> None:
    assert pool.run_code_sync("return [NaN, Infinity, () => 1, undefined]") == [None, None, None, None]
    assert pool.run_code_sync("return {keep: 1, dropped: () => 1, gone: undefined}") == {"keep": 1}
    assert pool.run_code_sync("return new Date(0)") == "1970-01-01T00:00:00.000Z"


# --- errors -------------------------------------------------------------------------------------------------


def test_a_thrown_error_carries_its_message(pool: SandboxPool) -> None:
    error = error_of(pool, "throw new TypeError('the order has no lines')")
    assert error.kind == "error"
    assert "TypeError: the order has no lines" in error.message
    assert "the order has no lines" in str(error)
    assert "{\"code\":42}" in error_of(pool, "throw {code: 42}").message
    assert "plain text" in error_of(pool, "throw 'plain text'").message


def test_a_runtime_error_in_a_condition_is_an_error(pool: SandboxPool) -> None:
    with pytest.raises(SandboxError) as caught:
        pool.run_condition_sync("input.missing.field")
    assert caught.value.kind == "error"


def test_a_syntax_error_fails_the_run_and_is_reported_by_compile_problem(pool: SandboxPool) -> None:
    assert error_of(pool, "return {").kind == "syntax"
    with pytest.raises(SandboxError) as caught:
        pool.run_condition_sync("input.n >")
    assert caught.value.kind == "syntax"
    assert "SyntaxError" in pool.compile_problem_sync("return {", kind="code")
    assert "SyntaxError" in pool.compile_problem_sync("input.n >", kind="condition")
    assert pool.compile_problem_sync("const x = input.n; return x * 2", kind="code") is None
    assert pool.compile_problem_sync("input.n > 1 && context.outputs.a === 'b'", kind="condition") is None


def test_compile_problem_never_runs_the_code(single: SandboxPool) -> None:
    single.run_code_sync("return 1")
    [pid] = single.worker_pids()
    started = time.monotonic()
    # Run, either would time out and retire the worker; compiled only, both are instant and the worker stays.
    assert single.compile_problem_sync("while (true) {}", kind="code") is None
    assert single.compile_problem_sync("(() => { while (true) {} })()", kind="condition") is None
    assert time.monotonic() - started < TIME_LIMIT_S
    assert single.worker_pids() == [pid]


async def test_compile_problem_is_async_too(pool: SandboxPool) -> None:
    assert await pool.compile_problem("return 1") is None
    assert "SyntaxError" in await pool.compile_problem("a b", kind="condition")
    with pytest.raises(ValueError):
        await pool.compile_problem("1", kind="javascript")


def test_a_condition_is_exactly_one_expression(pool: SandboxPool) -> None:
    smuggled = "1); globalThis.leak = 1; (1"
    assert pool.compile_problem_sync(smuggled, kind="condition") is not None
    with pytest.raises(SandboxError) as caught:
        pool.run_condition_sync(smuggled)
    assert caught.value.kind == "syntax"


def test_code_cannot_close_its_function_wrapper(single: SandboxPool) -> None:
    breakout = "}); let leaked = 1; (function () {"
    assert single.compile_problem_sync(breakout) is not None
    assert error_of(single, breakout).kind == "syntax"
    assert single.run_code_sync("return typeof leaked") == "undefined"


# --- no host access -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", HOST_NAMES)
def test_host_capabilities_are_undefined(pool: SandboxPool, name: str) -> None:
    assert pool.run_code_sync(f"return typeof {name}") == "undefined"


def test_dynamic_import_gives_nothing(pool: SandboxPool) -> None:
    error = error_of(pool, "return import('fs')")
    assert error.kind == "not_json"
    assert "Promise" in error.message
    assert pool.run_code_sync("let got = 'nothing'; import('fs').then((m) => { got = m; }); return got") == "nothing"


@pytest.mark.parametrize(
    "reach_global",
    [
        "globalThis",
        "Function('return this')()",
        "({}).constructor.constructor('return this')()",
        "(() => {}).constructor('return this')()",
        "Object.getPrototypeOf(function* () {}).constructor('return this')().next().value",
        "(0, eval)('this')",
    ],
)
def test_every_way_to_the_global_reaches_a_frozen_sandbox_global(pool: SandboxPool, reach_global: str) -> None:
    code = f"""
        const g = {reach_global};
        return {{
            same: g === globalThis, frozen: Object.isFrozen(g),
            host: {json.dumps(HOST_NAMES)}.filter((name) => g[name] !== undefined),
        }};
    """
    assert pool.run_code_sync(code) == {"same": True, "frozen": True, "host": []}


def test_this_in_strict_user_code_is_undefined(pool: SandboxPool) -> None:
    assert pool.run_code_sync("return [typeof this, (function () { return typeof this; })()]") == [
        "undefined", "undefined"]


# --- nothing leaks between evaluations ----------------------------------------------------------------------

POLLUTIONS = [
    "Object.prototype.polluted = 1",
    "Object.defineProperty(Object.prototype, 'polluted', {value: 1})",
    "Array.prototype.push = function () { return 'hijacked'; }",
    "Array.prototype.polluted = 1",
    "leaked = 1",
    "globalThis.x = 1",
    "Function('leaked = 1; this.x = 1')()",
    "({}).constructor.constructor('globalThis.x = 1')()",
    "(0, eval)('var leaked = 1')",
    "(0, eval)('function leaked() {}')",
    "JSON.parse = () => 'hijacked'",
    "String.prototype.trim = () => 'hijacked'",
    "Object.setPrototypeOf(Object.prototype, {polluted: 1})",
    "Math.max = () => 'hijacked'",
    "Array.prototype[Symbol.iterator] = function* () { yield 'hijacked'; }",
    "Object.getPrototypeOf(function* () {}).polluted = 1",
    "Object.getPrototypeOf([][Symbol.iterator]()).next = () => ({done: true})",
    "Error.prepareStackTrace = () => 'hijacked'",
    "Error.stackTraceLimit = 0",
    "delete Array.prototype.map",
]

CHECK_CLEAN = """
    return {
        polluted: [({}).polluted, [].polluted, (function* () {}).polluted],
        push: [].push(1),
        globals: [typeof leaked, typeof x],
        parse: JSON.parse('1'),
        trim: ' a '.trim(),
        max: Math.max(1, 2),
        spread: [...[1, 2]],
        map: typeof [].map,
        stack: typeof new Error('e').stack,
    };
"""
CLEAN = {"polluted": [None, None, None], "push": 1, "globals": ["undefined", "undefined"], "parse": 1,
         "trim": "a", "max": 2, "spread": [1, 2], "map": "function", "stack": "string"}


@pytest.mark.parametrize("pollution", POLLUTIONS)
def test_pollution_in_one_run_is_not_visible_in_the_next(single: SandboxPool, pollution: str) -> None:
    single.run_code_sync("return 1")
    [pid] = single.worker_pids()
    try:
        single.run_code_sync(pollution)
    except SandboxError as error:
        assert error.kind == "error"  # refused (frozen), not a crash
    assert single.run_code_sync(CHECK_CLEAN) == CLEAN
    assert single.worker_pids() == [pid], "the same worker and context must have served both runs"


def test_regexp_statics_do_not_carry_the_last_match_to_the_next_run(single: SandboxPool) -> None:
    single.run_code_sync("return /(s3cr3t-\\w+)/.exec(input)[1]", input="token s3cr3t-abc")
    statics = "RegExp.$1, RegExp.input, RegExp.lastMatch, RegExp['$_'], RegExp.leftContext"
    leaked = single.run_code_sync(f"return [{statics}]")
    assert leaked == [None, None, None, None, None]


def test_closures_from_one_run_are_not_reachable_from_the_next(single: SandboxPool) -> None:
    stash = """
        const secret = input;
        try { Object.prototype.stash = () => secret; } catch (e) {}
        try { globalThis.stash = () => secret; } catch (e) {}
        try { Symbol.for('stash').description; } catch (e) {}
        return 1
    """
    single.run_code_sync(stash, input="the first user's data")
    assert single.run_code_sync("return [typeof ({}).stash, typeof stash]") == ["undefined", "undefined"]


def test_assigning_inherited_names_on_own_objects_still_works(pool: SandboxPool) -> None:
    code = """
        class NotFound extends Error { constructor(m) { super(m); this.name = 'NotFound'; } }
        const error = new Error(); error.message = 'set later';
        const o = {}; o.toString = () => 'custom'; o.constructor = 'mine';
        const a = [1]; a.push = 'own';
        return [String(new NotFound('x')), error.message, String(o), o.constructor, a.push];
    """
    assert pool.run_code_sync(code) == ["NotFound: x", "set later", "custom", "mine", "own"]


def test_a_context_rebuilt_after_its_evaluation_budget_keeps_answering() -> None:
    pool = SandboxPool(size=1, context_evaluations=3)
    try:
        assert [pool.run_code_sync("return input * 2", input=n) for n in range(10)] == [n * 2 for n in range(10)]
        assert pool.run_code_sync(CHECK_CLEAN) == CLEAN
    finally:
        pool.close()


# --- limits -------------------------------------------------------------------------------------------------


async def test_an_infinite_loop_times_out_and_the_pool_serves_the_next_evaluation(pool: SandboxPool) -> None:
    started = time.monotonic()
    with pytest.raises(SandboxError) as caught:
        await pool.run_code("while (true) {}")
    elapsed = time.monotonic() - started
    assert caught.value.kind == "timeout"
    assert "0.5 s" in caught.value.message
    assert TIME_LIMIT_S * 0.9 <= elapsed < TIME_LIMIT_S + GRACE_S
    assert await pool.run_code("return 'still serving'") == "still serving"
    with pytest.raises(SandboxError) as caught:
        await pool.run_condition("(() => { for (;;) {} })()")
    assert caught.value.kind == "timeout"


@pytest.mark.parametrize(
    "allocation",
    [
        "const a = []; while (true) { a.push(new Array(100000).fill(1)); }",
        "let s = 'x'; const keep = []; while (true) { s = s + s.slice(0, 1e6) + Math.random(); keep.push(s); }",
        # ArrayBuffers live outside V8's heap limit; the worker's RLIMIT_DATA stops them.
        "const keep = []; for (let i = 0; i < 16; i++) { const b = new Uint8Array(2 ** 28); b.fill(1); keep.push(b); }",
    ],
)
def test_a_huge_allocation_fails_with_memory(allocation: str) -> None:
    # A time limit the allocations cannot reach first, even on a loaded machine: filling ~900 MB of ArrayBuffers
    # took over 0.5 s there, which made this test about speed rather than memory.
    roomy = SandboxPool(size=1, time_limit_s=10)
    try:
        error = error_of(roomy, allocation)
        assert error.kind == "memory", error
        assert "64 MB" in error.message
        assert roomy.run_code_sync("return 'after'") == "after"
    finally:
        roomy.close()


def test_a_huge_output_fails_with_output_too_large(pool: SandboxPool) -> None:
    assert len(pool.run_code_sync("return 'x'.repeat(999_990)")) == 999_990
    error = error_of(pool, "return 'x'.repeat(1_100_000)")
    assert error.kind == "output_too_large"
    assert "1 MB" in error.message
    # The cap is on UTF-8 bytes, not characters.
    assert error_of(pool, "return 'é'.repeat(600_000)").kind == "output_too_large"


@pytest.mark.parametrize(
    "code",
    [
        "return function () {}",
        "const a = {}; a.self = a; return a",
        "return 10n",
        "return Symbol('s')",
        "return Promise.resolve(1)",
        "return {toJSON() { throw new Error('no'); }}",
    ],
)
def test_a_result_that_is_not_json_fails_with_not_json(pool: SandboxPool, code: str) -> None:
    assert error_of(pool, code).kind == "not_json"


async def test_a_worker_killed_mid_evaluation_fails_with_crashed_and_the_next_works() -> None:
    pool = SandboxPool(size=1, time_limit_s=10)
    try:
        await pool.run_code("return 1")
        [pid] = pool.worker_pids()
        running = asyncio.create_task(pool.run_code("while (true) {}"))
        await asyncio.to_thread(wait_for, lambda: is_running(pid), "the worker running the loop")
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(SandboxError) as caught:
            await running
        assert caught.value.kind == "crashed"
        assert "signal 9" in caught.value.message
        assert await pool.run_code("return 'next'") == "next"
        assert pool.worker_pids() != [pid]
    finally:
        pool.close()


def test_a_worker_that_stops_answering_is_killed_at_the_parents_deadline() -> None:
    pool = SandboxPool(size=1, time_limit_s=0.3, grace_s=0.5)
    try:
        pool.run_code_sync("return 1")
        [pid] = pool.worker_pids()
        os.kill(pid, signal.SIGSTOP)  # frozen, V8's own timer cannot fire: only the parent's deadline is left
        started = time.monotonic()
        with pytest.raises(SandboxError) as caught:
            pool.run_code_sync("return 2")
        assert caught.value.kind == "timeout"
        assert 0.8 <= time.monotonic() - started < 3
        assert process_state(pid) in (None, "Z")
        assert pool.run_code_sync("return 3") == 3
    finally:
        pool.close()


def test_input_that_json_cannot_carry_is_refused_in_the_callers_process(pool: SandboxPool) -> None:
    with pytest.raises(ValueError):
        pool.run_code_sync("return input", input=float("nan"))
    with pytest.raises(TypeError):
        pool.run_code_sync("return input", input={1, 2})


# --- the worker process -------------------------------------------------------------------------------------


def test_the_worker_has_no_secret_no_django_and_runs_under_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    # Seen from outside, through /proc: the worker answers nothing but run and compile.
    for name in ("OPENAI_API_KEY", "AGENTSITE_SECRET_KEY", "DATABASE_URL", "REDIS_URL", "PYTHONPATH"):
        monkeypatch.setenv(name, "secret-value")
    assert os.environ.get("DJANGO_SETTINGS_MODULE")
    pool = SandboxPool(size=1)
    try:
        assert pool.run_code_sync("return 1") == 1  # a worker is up
        [pid] = pool.worker_pids()
        proc = Path(f"/proc/{pid}")
        environ = (proc / "environ").read_bytes()
        arguments = (proc / "cmdline").read_bytes().split(b"\0")
        cwd = os.readlink(proc / "cwd")
        limits = {line[:26].strip(): line[26:].split()[0] for line in (proc / "limits").read_text().splitlines()[1:]}
        maps = (proc / "maps").read_text()
    finally:
        pool.close()
    names = {entry.split(b"=", 1)[0].decode() for entry in environ.split(b"\0") if entry}
    assert names <= {"PATH", "LANG", "LC_CTYPE"}
    assert b"secret-value" not in environ and b"DJANGO" not in environ
    assert b"-I" in arguments[1:3] and cwd == "/"  # isolated: no PYTHONPATH, no user site, not our directory
    assert "site-packages/django" not in maps and "/agentsite/" not in maps
    assert 0 < int(limits["Max address space"]) <= 2 * 2**40
    assert 0 < int(limits["Max data size"]) <= 2 * 2**30
    assert 0 < int(limits["Max cpu time"]) <= 600


def test_the_worker_imports_only_the_standard_library_and_v8() -> None:
    import ast

    tree = ast.parse((ROOT / "workflows" / "sandbox" / "worker.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module and node.level == 0}
    assert imported - {"__future__", "py_mini_racer"} <= set(sys.stdlib_module_names)


@pytest.mark.e2e
def test_the_pool_module_imports_without_django() -> None:
    code = "import sys, workflows.sandbox; assert 'django' not in sys.modules; print('ok')"
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, timeout=30)
    assert done.stdout.strip() == b"ok", done.stderr


def test_settings_choose_the_process_pool(settings: object) -> None:
    settings.AGENTSITE_SANDBOX_WORKERS = 3  # type: ignore[attr-defined]
    settings.AGENTSITE_SANDBOX_TIME_LIMIT_S = 2.5  # type: ignore[attr-defined]
    settings.AGENTSITE_SANDBOX_MEMORY_MB = 96  # type: ignore[attr-defined]
    settings.AGENTSITE_SANDBOX_OWNER_WORKERS = 2  # type: ignore[attr-defined]
    settings.AGENTSITE_SANDBOX_QUEUE_WAIT_S = 4.0  # type: ignore[attr-defined]
    assert _configured_arguments() == {"size": 3, "time_limit_s": 2.5, "memory_mb": 96, "owner_workers": 2,
                                       "queue_wait_s": 4.0}
    assert sandbox_pool() is sandbox_pool()


# --- concurrency and lifecycle ------------------------------------------------------------------------------


async def test_twenty_evaluations_gathered_at_once_all_answer_correctly(pool: SandboxPool) -> None:
    code = "return {n: input, square: input * input, mixed: context.tag + input}"
    answers = await asyncio.gather(*(pool.run_code(code, input=n, context={"tag": f"t{n}-"}) for n in range(20)))
    assert answers == [{"n": n, "square": n * n, "mixed": f"t{n}-{n}"} for n in range(20)]
    flags = await asyncio.gather(*(pool.run_condition("input % 2 === 0", input=n) for n in range(20)))
    assert flags == [n % 2 == 0 for n in range(20)]


async def test_an_evaluation_does_not_block_the_event_loop(pool: SandboxPool) -> None:
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(tick())
    await pool.run_code("const t = Date.now(); while (Date.now() - t < 300) {} return 1")
    ticker.cancel()
    assert ticks >= 10


async def test_a_cancelled_evaluation_does_not_poison_the_next() -> None:
    pool = SandboxPool(size=1, time_limit_s=5)
    try:
        await pool.run_code("return 0")
        [pid] = pool.worker_pids()
        busy = "const t = Date.now(); while (Date.now() - t < 300) {} return 'stale'"
        slow = asyncio.create_task(pool.run_code(busy))
        await asyncio.to_thread(wait_for, lambda: is_running(pid), "the worker running the slow code")
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow
        never_started = asyncio.create_task(pool.run_code("return 'stale too'"))
        await asyncio.sleep(0)
        never_started.cancel()
        assert [await pool.run_code("return input", input=n) for n in range(3)] == [0, 1, 2]
    finally:
        pool.close()


async def test_a_call_that_fails_after_its_caller_was_cancelled_is_not_logged_as_a_lost_error() -> None:
    """Its failure was the run's to report, and the run has gone: asyncio must not find an exception nobody
    read ("Future exception was never retrieved", once seen in CI's log at exit)."""
    lost: list[dict] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, context: lost.append(context))
    pool = SandboxPool(size=1, time_limit_s=5)
    try:
        await pool.run_code("return 0")
        [pid] = pool.worker_pids()
        failing = asyncio.create_task(pool.run_code(
            "const t = Date.now(); while (Date.now() - t < 300) {} throw new Error('late')"))
        await asyncio.to_thread(wait_for, lambda: is_running(pid), "the worker running the failing code")
        failing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await failing
        assert await pool.run_code("return 1") == 1  # after the failing call: the pool's one worker was busy
        await asyncio.sleep(0.05)  # the failed call's done callbacks
        gc.collect()
        assert [context.get("message") for context in lost] == []
    finally:
        pool.close()


def test_the_sync_twins_work_from_a_thread_without_an_event_loop(pool: SandboxPool) -> None:
    results: list[object] = []

    def work() -> None:
        with pytest.raises(RuntimeError):
            asyncio.get_running_loop()
        results.append(pool.run_code_sync("return input + 1", input=1))
        results.append(pool.run_condition_sync("input === 'x'", input="x"))
        results.append(pool.compile_problem_sync("return 1"))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=10)
    assert results == [2, True, None]


def test_the_pool_starts_afresh_when_its_recorded_pid_is_not_ours() -> None:
    pool = SandboxPool(size=1)
    try:
        pool.run_code_sync("return 1")
        [old] = pool.worker_pids()
        pool._pid = -1  # what a forked child sees: workers recorded by another pid
        assert pool.run_code_sync("return 'fresh'") == "fresh"
        assert pool.worker_pids() != [old]
        # Dropped, not signalled: it exits by itself at EOF on its stdin.
        wait_for(lambda: process_state(old) in (None, "Z"), f"the inherited worker {old} exiting")
    finally:
        pool.close()


def test_a_forked_child_uses_its_own_workers(pool: SandboxPool) -> None:
    pool.run_code_sync("return 1")
    parent_workers = set(pool.worker_pids())
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        try:
            os.close(reader)
            answer = {"value": pool.run_code_sync("return 6 * 7"), "workers": pool.worker_pids()}
            pool.close()
            os.write(writer, json.dumps(answer).encode())
        finally:
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        answer = json.loads(pipe.read() or b"{}")
    os.waitpid(child, 0)
    assert answer["value"] == 42
    assert answer["workers"] and not set(answer["workers"]) & parent_workers
    assert set(pool.worker_pids()) == parent_workers
    assert pool.run_code_sync("return 'parent still served'") == "parent still served"


def test_close_leaves_no_worker_process() -> None:
    before = sandbox_children()
    pool = SandboxPool(size=2)
    barrier = threading.Barrier(2)

    def busy(owner: str) -> None:
        barrier.wait()
        pool.run_code_sync("const t = Date.now(); while (Date.now() - t < 100) {} return 1", owner=owner)

    # Two owners: one owner alone holds at most size - 1 workers.
    threads = [threading.Thread(target=busy, args=(f"user-{n}",)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=15)
    started = sandbox_children() - before
    assert len(started) == 2 and set(pool.worker_pids()) == started
    pool.close()
    assert sandbox_children() - before == set()
    assert pool.worker_pids() == []

"""A sandbox worker process: V8 (mini-racer) behind a JSON-lines protocol on stdin/stdout."""

# Run only by `workflows.sandbox.process` as `python -I <this file> <config JSON>`, with a scrubbed environment.
# It imports the standard library and py_mini_racer, nothing of ours and no Django: it holds no secret, no settings
# and no database connection, so code that escapes V8 finds an empty, resource-limited process.
#
# Contract:
# - At start it sets its resource limits (before V8 loads), builds a locked-down context (lockdown.js) and writes
#   `{"ready": true, "pid": N}`, or `{"ready": false, "error": "..."}` and exits.
# - Then, per request line `{"id", "op": "run"|"compile", "kind": "code"|"condition", "source",
#   "input": <JSON text>, "context": <JSON text>}`, exactly one answer line:
#   `{"id", "ok": true, "value": <JSON>}` (a code value; `null` for undefined), `{"id", "ok": true, "flag": bool}`
#   (a condition), `{"id", "ok": true, "problem": null|"..."}` (compile), or
#   `{"id", "ok": false, "kind": "<SandboxError.kind>", "message": "..."}`.
#   Every answer carries `"retire": bool`; a worker that says true exits right after (a timeout, an out-of-memory,
#   an unexpected failure, or its CPU budget half spent), and the pool replaces it.
# - An answer is written only once V8 is idle: the microtasks an evaluation queued (promise jobs, async functions)
#   have run within the same time limit, or the answer is `timeout` and the worker exits with them. A request may
#   carry `"time_limit_s"`, a lower limit than the worker's own (what is left of a run's sandbox budget).
# - It exits at EOF on stdin (its pool is gone).

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

# V8 reserves its whole address-space layout at start: ~1,421 GiB of virtual memory (VmPeak, measured with
# mini-racer 0.14.1), mostly the 1 TiB V8 sandbox and the Oilpan cage. Below that, V8 falls back to smaller
# reservations and whether it starts is not monotonic in the limit (measured: 1450, 1024, 512, 256, 160 GiB start;
# 1400, 320, 208, 192 and 128 GiB abort with "Oilpan: CagedHeap reservation"). So RLIMIT_AS sits just above the
# natural layout: it stops runaway mappings beyond it but cannot bound memory. RLIMIT_DATA (private writable
# memory, ~570 MiB at start) is the real bound, and the only one on ArrayBuffer memory, which V8's heap limit
# does not count.
ADDRESS_SPACE_BYTES = 1536 * 2**30
DATA_BASE_BYTES = 640 * 2**20
DATA_PER_HEAP_MB = 4
# SIGXCPU kills a worker at the soft limit; it retires itself at half of it, so the kill only hits a worker that
# ran away without answering (the pool's own deadline normally kills such a worker first).
CPU_LIMIT_S = 120
OPEN_FILES = 64

LOCKDOWN = Path(__file__).with_name("lockdown.js")
DRIVER = "__agentsiteDrive"
PROBE = "0"  # an eval V8 runs only after every microtask queued before it

Answer = dict[str, Any] | bytes  # bytes: a JSON value spliced into the answer line as is


def set_limits(memory_mb: int) -> None:
    data_bytes = DATA_BASE_BYTES + DATA_PER_HEAP_MB * memory_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))
    resource.setrlimit(resource.RLIMIT_DATA, (data_bytes, data_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_LIMIT_S, CPU_LIMIT_S + 10))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))


def take_protocol_stdout() -> Any:
    """Keep fd 1 for the protocol only: anything V8 or a library prints goes to stderr instead."""
    protocol = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    return protocol


class Engine:
    """One locked-down V8 context; rebuilt after `context_evaluations` runs.

    MiniRacer is created inside the worker's running event loop so that it uses that loop: an evaluation is then
    one hop to V8's thread and back (~0.18 ms), where the sync API adds a hop through a thread of its own.
    """

    def __init__(self, memory_mb: int, time_limit_s: float, context_evaluations: int) -> None:
        self.memory_bytes = memory_mb * 2**20
        self.time_limit_s = time_limit_s
        self.context_evaluations = context_evaluations
        # The driver is a script-level const: out of globalThis's properties, its binding immutable, and the function
        # frozen by lockdown.js. Code that finds it by name can only run code through it, which it can do anyway.
        self.lockdown_source = "const " + DRIVER + " = " + LOCKDOWN.read_text(encoding="utf-8")
        self.racer: Any = None
        self.evaluations = 0

    def renew(self) -> None:
        # V8 loads only in the worker process that runs the code, not where this module is imported for its types.
        from py_mini_racer import MiniRacer

        if self.racer is not None:
            self.racer.close()
        self.racer = MiniRacer()
        self.racer.set_hard_memory_limit(self.memory_bytes)
        self.racer.eval(self.lockdown_source)
        self.evaluations = 0

    async def call(self, request: dict[str, Any]) -> str:
        """The driver's tagged answer, given only once V8 is idle again; raises TimeoutError past the limit.

        An evaluation returns before the microtasks it queued have run (`Promise.resolve().then(f)`, an async
        function, `await`): V8 runs them after the eval's task, in its own thread, where cancelling the eval
        no longer reaches them. The probe is a second eval, which V8 runs only once that queue is empty; under
        the same timeout, it makes queued work count against the evaluation's limit, and a worker that
        answers has nothing left running (a timeout retires the worker, and the queue dies with it).
        """
        self.evaluations += 1
        arguments = (request["op"], request.get("kind", "code"), request["source"],
                     request.get("input", "null"), request.get("context", "null"))
        script = DRIVER + "(" + ",".join(json.dumps(argument) for argument in arguments) + ")"
        async with asyncio.timeout(self.limit_for(request)):
            tagged = await self.racer.eval_cancelable(script)
            await self.racer.eval_cancelable(PROBE)
        return tagged

    def limit_for(self, request: dict[str, Any]) -> float:
        """The request's own time limit (what is left of its run's budget), never above the worker's."""
        asked = request.get("time_limit_s")
        if isinstance(asked, int | float) and asked > 0:
            return min(self.time_limit_s, float(asked))
        return self.time_limit_s

    def out_of_memory(self) -> bool:
        return bool(self.racer.was_hard_memory_limit_reached())

    def renew_if_worn(self) -> None:
        if self.evaluations >= self.context_evaluations:
            self.renew()


def answer_for(tagged: str, request: dict[str, Any], output_cap_bytes: int) -> Answer:
    """Turn the driver's tagged string into an answer; a JSON value is spliced in as bytes, never re-parsed."""
    tag, payload = tagged[:1], tagged[1:]
    if request["op"] == "compile":
        return {"ok": True, "problem": payload if tag in ("s", "e") else None}
    if tag == "s":
        return {"ok": False, "kind": "syntax", "message": payload}
    if tag == "e":
        kind = "memory" if "Array buffer allocation failed" in payload else "error"
        return {"ok": False, "kind": kind, "message": payload}
    if tag in ("t", "f"):
        return {"ok": True, "flag": tag == "t"}
    if tag == "n":
        return {"ok": False, "kind": "not_json", "message": payload}
    value = b"null" if tag == "u" else payload.encode("utf-8", "replace")
    if len(value) > output_cap_bytes:
        return {"ok": False, "kind": "output_too_large", "message": str(len(value))}
    return value


async def evaluate(engine: Engine, request: dict[str, Any], output_cap_bytes: int) -> tuple[Answer, bool]:
    """Returns (answer, retire)."""
    if request["op"] not in ("run", "compile"):  # nothing else is served: not even to tests
        return {"ok": False, "kind": "error", "message": f"Unknown operation {request['op']!r}."}, False
    try:
        tagged = await engine.call(request)
    except TimeoutError:  # asyncio.wait_for's, an alias since 3.11
        return {"ok": False, "kind": "timeout", "message": ""}, True
    except Exception as exc:  # the worker's boundary: anything else leaves V8 in a state we do not trust
        if engine.out_of_memory():
            return {"ok": False, "kind": "memory", "message": ""}, True
        return {"ok": False, "kind": "crashed", "message": f"{type(exc).__name__}: {exc}"[:1000]}, True
    if engine.out_of_memory():
        # Queued work that allocates without end (a promise chain) can reach the heap limit before the time
        # limit: V8 then stops it and the probe answers, but the evaluation did not finish its work.
        return {"ok": False, "kind": "memory", "message": ""}, True
    return answer_for(tagged, request, output_cap_bytes), False


def encode_line(request_id: int | None, answer: Answer, retire: bool) -> bytes:
    head = json.dumps({"id": request_id, "retire": retire}).encode()[:-1]
    if isinstance(answer, bytes):
        return head + b', "ok": true, "value": ' + answer + b"}\n"
    return head + b", " + json.dumps(answer).encode()[1:] + b"\n"


async def serve(config: dict[str, Any], protocol: Any) -> None:
    engine = Engine(config["memory_mb"], config["time_limit_s"], config["context_evaluations"])
    engine.renew()
    protocol.write(json.dumps({"ready": True, "pid": os.getpid()}).encode() + b"\n")
    protocol.flush()
    stdin = sys.stdin.buffer
    # Blocking reads on the loop's thread are fine: between requests the loop has nothing else to do.
    while line := stdin.readline():
        request = json.loads(line)
        answer, retire = await evaluate(engine, request, config["output_cap_bytes"])
        retire = retire or time.process_time() > CPU_LIMIT_S / 2
        protocol.write(encode_line(request.get("id"), answer, retire))
        protocol.flush()
        if retire:
            break
        engine.renew_if_worn()
    # os._exit, not a return through asyncio.run: V8's teardown can hang after an out-of-memory (seen with
    # mini-racer 0.14.1), and there is nothing to flush or clean up.
    os._exit(0)


def main() -> None:
    config = json.loads(sys.argv[1])
    protocol = take_protocol_stdout()
    try:
        set_limits(config["memory_mb"])
        asyncio.run(serve(config, protocol))
    except Exception as exc:  # reported to the pool, which turns it into a SandboxError
        protocol.write(json.dumps({"ready": False, "error": f"{type(exc).__name__}: {exc}"}).encode() + b"\n")
        protocol.flush()
        os._exit(1)


if __name__ == "__main__":
    main()

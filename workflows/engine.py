"""The workflow engine: runs a validated graph with asyncio and records what each node did."""

# How a run walks the graph (docs/api.md "Execution"):
# - It starts at the input node. Edges that lead back to a node already on the current path (found by a
#   depth-first walk from the input node: the visited set) are dropped, so every node runs at most once and
#   the rest is a DAG; nodes the input node cannot reach never run.
# - A node runs once every edge into it is settled, provided at least one was taken; an edge is taken when
#   its source finished (a condition takes only the edge to its chosen branch). A node whose edges all
#   settled untaken is skipped, and so are the edges it leads to. So a join waits for all its reached
#   predecessors, and independent branches run at the same time (at most `max_concurrency` nodes at once).
# - A node's input is its predecessor's output; at a join where several were taken, an object of their
#   outputs by node name. The input node's output is the run's input text.
# - A failing node is retried per its `retry` (exponential backoff with jitter) unless its failure says another
#   attempt cannot help (a SandboxError of kind "budget": the run's sandbox time is spent); after the last attempt,
#   `onError: "continue"` makes its output null and the run goes on, otherwise the run stops with `error`
#   and the nodes still running are cancelled.
# - An approval node (a type whose `pauses` is set) does not run: reaching it records it in `pending` with
#   what its approvers are asked, and the rest of the graph goes on as far as it can without it. A run that
#   ends with pending approvals ends `waiting`; `state()` is then all a later execution needs to go on. A
#   resumed execution (`done` from that state, `decided` the approval nodes' outputs) replays the finished
#   nodes' outputs without running them again, gives each decided approval node its decision as output, and
#   runs the rest; an approval node still undecided stays pending.
# - Cancelling the task that awaits `Execution.run()` cancels every running node (an LLM request closes
#   at once); the execution's `trace` and `outputs` then hold what had happened.

from __future__ import annotations

import asyncio
import collections
import logging
import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agentsite.core import tracing
from agentsite.core.errors import AppError
from workflows.graph import Graph, Node, successors
from workflows.nodes import NodeFailure, Routed, RunContext, node_type
from workflows.sandbox import SandboxError

logger = logging.getLogger(__name__)

MAX_CONCURRENCY = 8
MAX_DEPTH = 5  # workflows calling workflows through their tools


@dataclass
class TraceEntry:
    node: str
    type: str
    status: str = "running"  # running | success | error | cancelled
    attempts: int = 0
    started_at: str = ""
    duration_ms: float = 0.0
    error: str | None = None
    _started: float = field(default=0.0, repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "type": self.type, "status": self.status, "attempts": self.attempts,
                "started_at": self.started_at, "duration_ms": self.duration_ms, "error": self.error}


@dataclass
class Failure:
    node: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"node": self.node, "message": self.message}


class _Stop(Exception):
    """A node failed with onError "fail": the run stops."""

    def __init__(self, failure: Failure):
        super().__init__(failure.message)
        self.failure = failure


def plan(graph: Graph) -> tuple[Node, dict[str, list[str]], dict[str, int]]:
    """The input node, each reachable node's successors without back edges, and how many edges lead into each."""
    by_id = graph.by_id()
    start = next(node for node in graph.nodes if node.type == "input")
    following = successors(graph)
    forward: dict[str, list[str]] = {}
    state: dict[str, str] = {}  # "open" while on the current path, "done" after
    stack: list[tuple[str, int]] = [(start.id, 0)]
    state[start.id] = "open"
    forward[start.id] = []
    while stack:  # an iterative depth-first walk: deep chains must not hit the recursion limit
        node_id, index = stack.pop()
        nexts = following[node_id]
        if index < len(nexts):
            stack.append((node_id, index + 1))
            target = nexts[index]
            if state.get(target) == "open":
                continue  # a back edge: dropped, so the node does not wait for itself
            forward[node_id].append(target)
            if target not in state:
                state[target] = "open"
                forward[target] = []
                stack.append((target, 0))
        else:
            state[node_id] = "done"
    waiting = {node_id: 0 for node_id in forward}
    for targets in forward.values():
        for target in targets:
            waiting[target] += 1
    return by_id[start.id], forward, waiting


class Execution:
    """One run of a graph. Create it, await `run()` once; read `status`, `outputs`, `output`, `error`, `trace`."""

    def __init__(self, graph: Graph, ctx: RunContext, *, max_concurrency: int = MAX_CONCURRENCY,
                 done: dict[str, dict[str, Any]] | None = None, decided: dict[str, Any] | None = None):
        self.graph = graph
        self.ctx = ctx
        self.nodes = graph.by_id()
        self.start, self.forward, self.waiting = plan(graph)
        self.taken: dict[str, dict[str, Any]] = {node_id: {} for node_id in self.forward}  # inputs by source name
        self.trace: list[TraceEntry] = []
        self.status = "running"
        self.output: Any = None
        self.error: Failure | None = None
        self._slots = asyncio.Semaphore(max_concurrency)
        self._tasks: dict[asyncio.Task, str] = {}
        self.replayed = dict(done or {})  # node id -> {output, targets}: finished in an earlier execution
        self.decided = dict(decided or {})  # approval node id -> its output (the decision)
        self.done: dict[str, dict[str, Any]] = {}  # node id -> {output, targets}, every node settled so far
        self.pending: dict[str, dict[str, Any]] = {}  # approval node id -> what its request() asked
        self._ready: collections.deque[tuple[str, Any, list[str] | None]] = collections.deque()

    def state(self) -> dict[str, Any]:
        """What a resumed execution needs (JSON): the settled nodes' outputs and routes."""
        return {"done": self.done}

    @property
    def outputs(self) -> dict[str, Any]:
        return self.ctx.outputs

    async def run(self) -> str:
        """Run to the end; returns the status (success | error). Cancelling it cancels the running nodes."""
        try:
            self._launch(self.start.id, self.ctx.input)
            self._drain()
            while self._tasks:
                done, _ = await asyncio.wait(self._tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    self._settle(self._tasks.pop(task), task)
                self._drain()
        except _Stop as stop:
            self.status, self.error = "error", stop.failure
            await self._cancel_running()
            return self.status
        except BaseException:
            await self._cancel_running()
            raise
        self.status = "waiting" if self.pending else "success"
        return self.status

    def _drain(self) -> None:
        """Settle the nodes whose outputs are known without running them (replayed, decided), iteratively:
        a long chain of them must not recurse."""
        while self._ready:
            node_id, output, targets = self._ready.popleft()
            self._settle_output(node_id, output, targets)

    def _launch(self, node_id: str, value: Any) -> None:
        if node_id in self.replayed:
            record = self.replayed[node_id]
            self._ready.append((node_id, record.get("output"), record.get("targets")))
            return
        node = self.nodes[node_id]
        kind = node_type(node.type)
        if kind is not None and kind.pauses:
            if node_id in self.decided:
                self.trace.append(TraceEntry(node.name, node.type, status="success", attempts=1,
                                             started_at=_now_iso()))
                self.ctx.emit("node_finished", {"node": node.name, "status": "success", "duration_ms": 0.0,
                                                "output": self.decided[node_id]})
                self._ready.append((node_id, self.decided[node_id], None))
                return
            self.ctx.emit("node_started", {"node": node.name})
            try:
                self.pending[node_id] = kind.request(node, value, self.ctx)
            except Exception as exc:  # a boundary, as in _attempts: its failure, in words
                entry = TraceEntry(node.name, node.type, status="error", attempts=1, started_at=_now_iso(),
                                   error=failure_message(exc))
                self.trace.append(entry)
                raise _Stop(Failure(node.name, entry.error or "The node failed.")) from None
            self.trace.append(TraceEntry(node.name, node.type, status="waiting", attempts=1, started_at=_now_iso()))
            return
        task = asyncio.create_task(self._execute(self.nodes[node_id], value), name=f"workflow-node:{node_id}")
        self._tasks[task] = node_id

    def _settle(self, node_id: str, task: asyncio.Task) -> None:
        outcome = task.result()  # raises _Stop for a failed node
        output, targets = (outcome.output, sorted(outcome.targets)) if isinstance(outcome, Routed) else (outcome, None)
        self._settle_output(node_id, output, targets)

    def _settle_output(self, node_id: str, output: Any, targets: list[str] | None) -> None:
        self.done[node_id] = {"output": output, "targets": targets}
        node = self.nodes[node_id]
        self.ctx.outputs[node.name] = output
        if node.type == "output":
            self.output = output
        for target in self.forward[node_id]:
            self._edge_settled(target, node.name, output, taken=targets is None or target in targets)

    def _edge_settled(self, target: str, source_name: str, output: Any, *, taken: bool) -> None:
        if taken:
            self.taken[target][source_name] = output
        self.waiting[target] -= 1
        if self.waiting[target]:
            return
        inputs = self.taken[target]
        if not inputs:  # not reached: nothing runs down this way
            for following in self.forward[target]:
                self._edge_settled(following, self.nodes[target].name, None, taken=False)
            return
        self._launch(target, next(iter(inputs.values())) if len(inputs) == 1 else dict(inputs))

    async def _execute(self, node: Node, value: Any) -> Any:
        if not tracing.ENABLED:
            return await self._execute_node(node, value, None)
        attributes = {"agentsite.workflow.node": node.name, "agentsite.workflow.node_type": node.type,
                      "agentsite.workflow.run_id": self.ctx.run_id or None}
        with tracing.span(f"workflow node {node.type}", **attributes) as span:
            return await self._execute_node(node, value, span)

    async def _execute_node(self, node: Node, value: Any, span: Any) -> Any:
        async with self._slots:
            entry = TraceEntry(node.name, node.type, started_at=_now_iso(), _started=time.perf_counter())
            self.trace.append(entry)
            self.ctx.emit("node_started", {"node": node.name})
            try:
                output = await self._attempts(node, value, entry)
            except asyncio.CancelledError:
                self._finish(entry, "cancelled", None, span)
                raise
            except _Stop:
                self._finish(entry, "error", None, span)
                raise
            self._finish(entry, "error" if entry.error else "success", output, span)
            return output

    async def _attempts(self, node: Node, value: Any, entry: TraceEntry) -> Any:
        retry = node.config.get("retry") or {}
        attempts, backoff_ms = 1 + retry.get("max", 0), retry.get("backoffMs", 0)
        kind = node_type(node.type)
        assert kind is not None, "a validated graph has known types only"
        for attempt in range(1, attempts + 1):
            entry.attempts = attempt
            try:
                return await kind.run(node, value, self.ctx)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a boundary: whatever a node raises is its failure, in words
                entry.error = failure_message(exc)
                if not retryable(exc):
                    break
            if attempt < attempts and backoff_ms:
                # Exponential backoff with jitter, so retries of many runs do not hit a service in step.
                await asyncio.sleep(backoff_ms * 2 ** (attempt - 1) * random.uniform(0.5, 1.5) / 1000)
        if node.config.get("onError") == "continue":
            return None
        raise _Stop(Failure(node.name, entry.error or "The node failed."))

    def _finish(self, entry: TraceEntry, status: str, output: Any, span: Any = None) -> None:
        entry.status = status
        entry.duration_ms = round((time.perf_counter() - entry._started) * 1000, 3)
        # The node's span: its status as the run records it (an error continued past is an error here too).
        tracing.annotate(span, "node_" + status if status in ("error", "cancelled") else None,
                         **{"agentsite.workflow.node_status": status, "agentsite.workflow.attempts": entry.attempts})
        # An event's data is JSON: a condition's Routed is the engine's own, its output is what the node gave.
        value = output.output if isinstance(output, Routed) else output
        self.ctx.emit("node_finished", {"node": entry.node, "status": status, "duration_ms": entry.duration_ms,
                                        "output": value})

    async def _cancel_running(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            # asyncio.wait never swallows a cancellation of this task (unlike wait_for on Python 3.11).
            await asyncio.wait(self._tasks)
        self._tasks.clear()


def retryable(exc: Exception) -> bool:
    """False for a failure another attempt cannot mend (the run's sandbox budget is spent)."""
    return getattr(exc, "retryable", True) is not False


def failure_message(exc: Exception) -> str:
    if isinstance(exc, NodeFailure | SandboxError):
        return str(getattr(exc, "message", None) or exc)
    if isinstance(exc, AppError):
        return exc.message
    logger.exception("A workflow node raised")
    return f"The node failed: {type(exc).__name__}: {exc}"


def _now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")

"""Running a workflow: its run record, the engine, the streamed events, and the workflow as a tool."""

# `workflow_execute` runs a run that is `running` and stores how it ended: `success`, `error` (with the
# failing node, or with the server's own failure), or `cancelled` when the task awaiting it is cancelled
# because its client hung up (the LLM request of a running `llm` node closes with it). `cancelled` means
# only that: code that stops a run for a failure of its own says so first (`Interruption.failed`), and the
# run is stored `error` with that cause. A run reached again through workflow tools nests one level deeper;
# past MAX_DEPTH the tool answers with an error instead of running.

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from accounts.selectors import key_for_work  # keys are read through accounts' selector, never its models
from agentsite.agent.agents import WORKFLOW_FUNCTION_PREFIX, workflow_function_name
from agentsite.agent.model_sources import ModelSource
from agentsite.agent.tools import Tool, ToolContext, ToolError, ToolResult, ToolSource
from agentsite.agent.types import Finish, Message, StreamEvent, TextDelta, Usage
from agentsite.agent.usage import Caller, caller_for, calling, current_caller
from agentsite.core import tracing
from agentsite.core.dbcall import db
from agentsite.core.errors import AppError
from workflows import approvals, selectors, services
from workflows.engine import MAX_DEPTH, Execution
from workflows.graph import Graph
from workflows.models import WorkflowRun
from workflows.nodes import RunContext, as_text

logger = logging.getLogger(__name__)

MAX_INPUT_CHARS = 100_000
TOOL_PREFIX = WORKFLOW_FUNCTION_PREFIX
MODEL_PREFIX = "workflow:"
TOOL_SOURCE = "workflows"
# How deep the current task is in workflows run through workflow tools (0: not inside a workflow).
_depth: contextvars.ContextVar[int] = contextvars.ContextVar("workflow_depth", default=0)

Emit = Callable[[str, dict[str, Any]], None]
HUNG_UP = "The run was cancelled (the client hung up)."


def _ignore(kind: str, data: dict[str, Any]) -> None:
    return None


@dataclass
class Interruption:
    """Why the task running a run is cancelled from outside. Unless `failed()` was called first, the client
    hung up (stored `cancelled`); after it, the server failed to serve the run (stored `error`, naming why)."""

    failure: str | None = None

    def failed(self, exc: BaseException) -> None:
        self.failure = f"The server failed while running the workflow: {type(exc).__name__}: {exc}"

    def outcome(self) -> tuple[str, dict[str, Any]]:
        """The status and error to store for a run stopped this way."""
        if self.failure is None:
            return WorkflowRun.CANCELLED, {"node": None, "message": HUNG_UP}
        return WorkflowRun.ERROR, {"node": None, "message": self.failure}


async def workflow_execute(*, run: WorkflowRun, emit: Emit | None = None, interruption: Interruption | None = None,
                           time_limit: float | None = None, caller: Caller | None = None) -> WorkflowRun:
    """Run a `running` run to its end and store it. A run past `time_limit` seconds is stopped and stored
    `error` saying so. A run whose task is cancelled is stored before the cancellation goes on: `cancelled`,
    or `error` when `interruption` says the server stopped it for a failure."""
    depth = _depth.get()
    done = (run.state or {}).get("done")
    # A resumed run (it waited for approvals): its finished nodes replay, its decided approvals give outputs.
    decided = await db(approvals.decisions_of_run, run_id=run.pk) if done is not None else None
    execution = Execution(Graph.from_dict(run.graph),
                          RunContext(input=run.input, owner_id=run.owner_id, emit=emit or _ignore, depth=depth,
                                     is_admin=run.admin_rights, run_id=str(run.pk)),
                          done=done, decided=decided)
    try:
        caller = await _run_caller(run, caller)
    except AppError as exc:  # the key it runs as was revoked (or expired) while it was queued or waiting
        return await _store(run, execution, WorkflowRun.ERROR, {"node": None, "message": exc.message})
    token = _depth.set(depth + 1)  # the nodes' tasks inherit it: a workflow tool they call sees the nesting
    # The run's span (a coroutine, not a generator: tracing.span may wrap it); the nodes' spans are its children.
    with tracing.span("invoke_workflow", **{"gen_ai.operation.name": "invoke_workflow",
                                            "agentsite.workflow.id": str(run.workflow_id),
                                            "agentsite.workflow.run_id": str(run.pk),
                                            "agentsite.workflow.version": run.version,
                                            "agentsite.workflow.resumed": done is not None}) as span:
        try:
            async with asyncio.timeout(time_limit):
                with calling(caller):  # the nodes' model calls count to who started the run (its key, if any)
                    status = await execution.run()
            error = execution.error.as_dict() if execution.error else None
        except TimeoutError:  # only the limit's: the engine turns what nodes raise into their failure
            status, error = WorkflowRun.ERROR, {"node": None, "message": f"The run did not finish within "
                                                                        f"{time_limit:g} seconds."}
        except asyncio.CancelledError:
            status, error = (interruption or Interruption()).outcome()
            tracing.annotate(span, **{"agentsite.workflow.run_status": status})
            # Shielded: the record is written even though this task is being cancelled; the cancellation goes on.
            await asyncio.shield(asyncio.ensure_future(_store(run, execution, status, error)))
            raise
        finally:
            _depth.reset(token)
        tracing.annotate(span, "run_" + status if status == WorkflowRun.ERROR else None,
                         **{"agentsite.workflow.run_status": status})
    return await _store(run, execution, status, error)


async def _run_caller(run: WorkflowRun, given: Caller | None = None) -> Caller:
    """Whom the run's model calls count to: the caller starting it now (`given`, or the door's current one) when
    it is the owner (a sync run), else the one the run recorded when it started (a queued or resumed run: its
    key, with the key's budget, read now). Raises AppError 403 when that key no longer stands: it no longer runs."""
    current = given or current_caller()
    if current is not None and current.user_id == run.owner_id:
        return current
    budget = await db(_key_budget, key_id=run.acting_key) if run.acting_key else None
    return Caller(run.owner_id, run.acting_key, "workflow", budget, run.admin_rights)


def _key_budget(*, key_id: str) -> dict[str, Any] | None:
    return key_for_work(key_id=int(key_id)).budget if key_id.isdigit() else None


async def _store(run: WorkflowRun, execution: Execution, status: str, error: dict[str, Any] | None) -> WorkflowRun:
    # A resumed run's trace: what ran before it waited (the waiting entries are now decided), then the rest.
    before = [entry for entry in run.trace if entry.get("status") != "waiting"] if execution.replayed else []
    trace = before + [entry.as_dict() for entry in execution.trace]
    if status == WorkflowRun.WAITING:
        return await db(approvals.run_wait, run=run, outputs=dict(execution.outputs), output=execution.output,
                        trace=trace, state=execution.state(), pending=execution.pending)
    return await db(services.run_finish, run=run, status=status, outputs=dict(execution.outputs),
                    output=execution.output, error=error, trace=trace)


async def workflow_run_events(*, run: WorkflowRun, interruption: Interruption | None = None,
                              ) -> AsyncIterator[tuple[str, Any]]:
    """A streamed run's events: `run_started`, `node_started`, `delta`, `node_finished`, then `done` with the
    stored run, or (a run that stopped at approval nodes) `approval_requested` with the stored run and its
    pending approvals, and the stream ends (the run goes on once they are decided); each event's data is JSON.
    Closing or cancelling the stream cancels the run, stored
    `cancelled` (the client hung up) unless `interruption` was told of a failure first (stored `error`)."""
    queue: asyncio.Queue[tuple[str, Any] | None] = asyncio.Queue()
    yield "run_started", {"run_id": str(run.pk)}
    task = asyncio.create_task(workflow_execute(run=run, emit=lambda kind, data: queue.put_nowait((kind, data)),
                                                interruption=interruption))
    task.add_done_callback(lambda _: queue.put_nowait(None))
    try:
        while (item := await queue.get()) is not None:
            yield item
        finished = task.result()
        if finished.status == WorkflowRun.WAITING:
            yield "approval_requested", (finished, await db(approvals.approvals_of_run, run_id=finished.pk))
        else:
            yield "done", finished
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait({task})  # never swallows this task's own cancellation, unlike wait_for


def check_input(value: Any) -> str:
    """The run's input text. Raises AppError 400 for anything but a string within the limit."""
    if not isinstance(value, str):
        raise AppError("invalid", "input must be a string.", 400, {"input": ["Give the run's input as text."]})
    if len(value) > MAX_INPUT_CHARS:
        raise AppError("invalid", f"input may be at most {MAX_INPUT_CHARS} characters.", 400,
                       {"input": [f"{len(value)} characters; the limit is {MAX_INPUT_CHARS}."]})
    return value


async def workflow_run_by_name(*, owner_id: int, name: str, input_text: str, emit: Emit | None = None,
                               time_limit: float | None = None, version: int | None = None,
                               caller: Caller | None = None) -> WorkflowRun:
    """Run the owner's workflow of this name now (the /v1 model and the tool), at `version` (None: the latest).
    Raises AppError 404."""
    return await workflow_run_start(owner_id=owner_id, name=name, input_text=input_text, emit=emit,
                                    time_limit=time_limit, version=version, caller=caller)


async def workflow_run_start(*, owner_id: int, input_text: str, workflow_id: uuid.UUID | None = None,
                             name: str | None = None, emit: Emit | None = None,
                             time_limit: float | None = None, version: int | None = None,
                             caller: Caller | None = None) -> WorkflowRun:
    """Run the owner's workflow (by id or by name) now, at `version` (None: the latest), and store the run (past
    `time_limit` seconds: stopped, stored `error`). `caller`: who starts it (default: the task's current
    caller, set by the door). Raises AppError 404 (no such workflow, or version)."""
    text = check_input(input_text)
    run = await db(_run_create, owner_id=owner_id, workflow_id=workflow_id, name=name, input_text=text,
                   version=version, caller=caller or current_caller())
    return await workflow_execute(run=run, emit=emit, time_limit=time_limit, caller=caller)


def _run_create(*, owner_id: int, workflow_id: uuid.UUID | None, name: str | None, input_text: str,
                version: int | None = None, caller: Caller | None = None) -> WorkflowRun:
    workflow = selectors.workflow_runnable(owner_id=owner_id, workflow_id=workflow_id, name=name, version=version)
    if workflow is None:
        raise AppError("not_found", f"You have no workflow named {name!r}." if name is not None
                       else "The workflow no longer exists.", 404)
    return services.run_create(workflow=workflow, input_text=input_text, caller=caller)


def run_reply(run: WorkflowRun) -> str:
    """A finished run as one text answer: its output, or why it failed."""
    if run.status == WorkflowRun.SUCCESS:
        return as_text(run.output)
    if run.status == WorkflowRun.WAITING:
        raise AppError("workflow_waiting", f"The workflow is waiting for an approval (run {run.pk}); it goes on "
                       "once its approvers decide (GET /api/approvals), and its output is then in the run.", 409,
                       {"run_id": str(run.pk)})
    message = (run.error or {}).get("message", "The workflow did not finish.")
    node = (run.error or {}).get("node")
    raise AppError("workflow_failed", f"The workflow failed at {node!r}: {message}" if node else message, 502,
                   {"run_id": str(run.pk)})


# --- the workflow as a tool (`workflow__<name>`) -------------------------------------------------------

TOOL_TIME_LIMIT_S = 600.0  # a workflow run through its tool
TOOL_TIMEOUT_MARGIN_S = 5.0
TOOL_SCHEMA = {"type": "object", "properties": {"input": {"type": "string", "description": "The workflow's input."}},
               "required": ["input"], "additionalProperties": False}


class WorkflowToolSource(ToolSource):
    """The caller's workflows, each as the tool `workflow__<name>` taking `{input}`."""

    name = TOOL_SOURCE
    label = "Workflows"

    async def list_tools(self, ctx: ToolContext) -> list[Tool]:
        if ctx.user_id is None:
            return []
        names = await db(selectors.workflow_names_for, owner_id=ctx.user_id)
        return [workflow_tool(name) for name in names]

    def list_tools_now(self, ctx: ToolContext) -> list[Tool] | None:
        if ctx.user_id is None:
            return []
        return [workflow_tool(name) for name in selectors.workflow_names_for(owner_id=ctx.user_id)]


def workflow_tool(name: str) -> Tool:
    async def call(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if _depth.get() >= MAX_DEPTH:
            raise ToolError(f"The workflow {name!r} was not run: workflows calling workflows may nest at most "
                            f"{MAX_DEPTH} deep (a workflow that reaches itself through its tools loops).")
        # The agent's caller runs it: without admin rights when the agent has none (an API key without the
        # admin scope), its key counting the run's model calls.
        caller = caller_for(ctx.user_id, "workflow")
        if ctx.is_admin is False:
            caller = dataclasses.replace(caller, admin=False)
        run = await workflow_run_by_name(owner_id=ctx.user_id, name=name, input_text=arguments["input"],
                                         time_limit=limit, caller=caller)
        return ToolResult.of_text(run_reply(run))

    limit = TOOL_TIME_LIMIT_S
    # Function names are at most 64 characters at OpenAI and most others; longer workflow names are cut. The
    # tool's own timeout comes after the run's limit: a run that takes too long is stopped by its limit and
    # stored `error` saying so, not cancelled from outside (which would store it `cancelled`).
    return Tool(name=workflow_function_name(name), description=f"Run the workflow {name!r} on an input text and "
                "return its output.", input_schema=TOOL_SCHEMA, call=call, source=TOOL_SOURCE,
                timeout=limit + TOOL_TIMEOUT_MARGIN_S)


# --- the workflow as a /v1 model (`workflow:<name>`) ---------------------------------------------------

def parse_model_name(rest: str) -> tuple[str, int | None]:
    """`<name>` or `<name>@<n>` (after `workflow:`) as (name, version or None). A name never holds `@`, so a
    suffix that is not a positive number is a model that does not exist (AppError 404 `model_not_found`)."""
    name, at, number = rest.partition("@")
    if not at:
        return name, None
    if not number.isdigit() or int(number) < 1:
        raise AppError("model_not_found", f"The model {MODEL_PREFIX + rest!r} does not exist: after '@' comes a "
                       "version number (workflow:<name>@<n>).", 404)
    return name, int(number)


class WorkflowModelSource(ModelSource):
    """Each of the caller's workflows as the model `workflow:<name>` (its latest version) and, not listed,
    `workflow:<name>@<n>` (version n): the last user message is the input, the output node's value the
    reply."""

    prefix = MODEL_PREFIX

    async def list_models(self, user_id: int | None) -> list[str]:
        if user_id is None:
            return []
        return [MODEL_PREFIX + name for name in await db(selectors.workflow_names_for, owner_id=user_id)]

    async def stream(self, model: str, messages: list[Message], user_id: int | None,
                     caller: Caller | None = None) -> AsyncIterator[StreamEvent]:
        if user_id is None:
            raise AppError("model_not_found", f"The model {model!r} does not exist for this caller; send a dashboard "
                           "token as the API key to use your workflows.", 404)
        name, version = parse_model_name(model[len(MODEL_PREFIX):])
        text = next((message.text for message in reversed(messages) if message.role == "user"), "")
        try:
            run = await workflow_run_by_name(owner_id=user_id, name=name, input_text=text, version=version,
                                             caller=caller)
        except AppError as exc:
            if exc.status == 404:
                raise AppError("model_not_found", f"The model {model!r} does not exist; GET /v1/models lists the "
                               "models.", 404) from None
            raise
        yield TextDelta(run_reply(run))
        yield Usage()
        yield Finish("stop")

"""The node registry: each node type's config (with how a form edits it), its checks, and what it does.

A `NodeType` declares its keys in `config`, adds the checks a schema cannot say in `problems()`, and turns
its input into its output in `run()`. `NODE_TYPES` is the one list of node types: saving validates against
it, and GET /api/meta answers `describe_node_types()`, from which the dashboard draws its node form.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from django.contrib.auth import get_user_model

from agentsite.agent import agents
from agentsite.agent.config import AgentSettings, aget_settings
from agentsite.agent.loop import run_agent
from agentsite.agent.tools import ToolContext, registry
from agentsite.agent.types import Message
from agentsite.agent.usage import caller_for
from agentsite.core.dbcall import db
from agentsite.core.errors import AppError
from workflows.graph import INPUT_REFERENCE, REFERENCE, CompileCheck, Graph, Node, references
from workflows.sandbox import RunBudget, run_budget, sandbox_pool

MAX_DELAY_MS = 600_000
MAX_RETRIES = 10
MAX_BACKOFF_MS = 60_000


class NodeFailure(Exception):
    """A node failed for a reason its author can act on (a tool error, an agent error)."""


@dataclass(frozen=True)
class ConfigKey:
    """One config key: what it holds, and how the node form edits it (`kind`: text, textarea, json, node (the
    id of another node), integer, names (a list of user names), select; `suggest`: the list a text field
    offers, "models" or "tools")."""

    types: tuple[type, ...]
    required: bool = False
    description: str = ""
    label: str = ""
    kind: str = "text"
    default: Any = None  # what a new node's form starts with
    options: tuple[tuple[str, str], ...] = ()
    min: int | None = None
    suggest: str = ""
    placeholder: str = ""
    rows: int | None = None  # a textarea's height in lines

    def describe(self, name: str) -> dict[str, Any]:
        described = {"name": name, "label": self.label or name, "kind": self.kind, "required": self.required,
                     "help": self.description, "default": self.default}
        extras = {"options": [list(pair) for pair in self.options], "min": self.min, "suggest": self.suggest,
                  "placeholder": self.placeholder, "rows": self.rows}
        return {**described, **{key: value for key, value in extras.items() if value not in (None, "", [])}}


@dataclass
class Routed:
    """A node output that continues down some of the node's successors only (a condition's chosen branch)."""

    output: Any
    targets: frozenset[str]


@dataclass
class RunContext:
    """What a running node may see and do: the run's input, finished nodes' outputs, its owner, events.

    The owner is also whose JavaScript it is: the sandbox shares its workers fairly between owners, and the
    run's code and condition nodes draw on one `sandbox_budget` (AGENTSITE_SANDBOX_RUN_BUDGET_S), retries
    included.
    """

    input: str
    owner_id: int
    emit: Callable[[str, dict[str, Any]], None]
    outputs: dict[str, Any] = field(default_factory=dict)  # by node name, as each node finishes
    depth: int = 0  # how deep in workflows calling workflows (through their tools) this run is
    run_id: str = ""  # the stored run's id (its spans name it)
    sandbox_budget: RunBudget = field(default_factory=run_budget)
    # False: the run was started without admin rights (an API key without the admin scope): its llm and tool
    # nodes never get an admin's tools. None: the owner's own rights, looked up when a tool is offered.
    is_admin: bool | None = None

    def value_of(self, name: str) -> Any:
        return self.input if name == INPUT_REFERENCE else self.outputs.get(name)

    def js_context(self) -> dict[str, Any]:
        return {"input": self.input, "outputs": dict(self.outputs)}


def as_text(value: Any) -> str:
    """A value as text: a string as is, nothing as "", anything else as JSON."""
    if isinstance(value, str):
        return value
    return "" if value is None else json.dumps(value, ensure_ascii=False)


def substitute(template: str, ctx: RunContext) -> str:
    """`${name}` replaced by that node's output as text (`${input}` by the run's input)."""
    return REFERENCE.sub(lambda match: as_text(ctx.value_of(match.group(1).strip())), template)


def substitute_value(value: Any, ctx: RunContext) -> Any:
    """substitute() through a JSON value; a string that is exactly one `${name}` takes that output's own value."""
    if isinstance(value, str):
        whole = REFERENCE.fullmatch(value.strip())
        return ctx.value_of(whole.group(1).strip()) if whole else substitute(value, ctx)
    if isinstance(value, dict):
        return {key: substitute_value(inner, ctx) for key, inner in value.items()}
    if isinstance(value, list):
        return [substitute_value(inner, ctx) for inner in value]
    return value


COMMON_KEYS = {
    "retry": ConfigKey((dict,), description="{max: 0-10, backoffMs}: attempts after the first, backoff doubling"),
    "onError": ConfigKey((str,), description='"fail" (default) or "continue" (output null, the run goes on)'),
}


class NodeType:
    """One kind of node. Subclasses set `name`, `label` and `config`, and implement `run()`."""

    name: ClassVar[str]
    label: ClassVar[str] = ""
    help: ClassVar[str] = ""  # what the form says of a type with no config
    config: ClassVar[dict[str, ConfigKey]] = {}
    referencing: ClassVar[tuple[str, ...]] = ()  # config keys whose ${name} references are resolved
    # A type that pauses the run (approval): the engine never calls run(); reaching the node calls request(),
    # which returns what to ask (JSON), and the node's output is given later (the decision).
    pauses: ClassVar[bool] = False

    def request(self, node: Node, value: Any, ctx: RunContext) -> dict[str, Any]:
        raise NotImplementedError

    def problems(self, node: Node, graph: Graph, compile_check: CompileCheck | None) -> list[str]:
        found = self._config_problems(node)
        names = {other.name for other in graph.nodes} | {INPUT_REFERENCE}
        for key in self.referencing:
            for reference in references(node.config.get(key)):
                if reference not in names:
                    found.append(f"{key} refers to ${{{reference}}}, which names no node.")
        return found

    def _config_problems(self, node: Node) -> list[str]:
        allowed = {**self.config, **COMMON_KEYS}
        found = [f"unknown config key {key!r} (known: {', '.join(sorted(allowed))})."
                 for key in node.config if key not in allowed]
        for key, spec in allowed.items():
            value = node.config.get(key)
            if value is None:
                if spec.required:
                    found.append(f"config.{key} is required.")
            elif not isinstance(value, spec.types) or (isinstance(value, bool) and bool not in spec.types):
                found.append(f"config.{key} must be {' or '.join(_type_word(kind) for kind in spec.types)}.")
        return found + _common_problems(node.config)

    async def run(self, node: Node, value: Any, ctx: RunContext) -> Any:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "label": self.label or self.name, "help": self.help, "pauses": self.pauses,
                "fields": [spec.describe(key) for key, spec in self.config.items()]}


def _type_word(kind: type) -> str:
    return {str: "a string", int: "an integer", float: "a number", bool: "a boolean", dict: "an object",
            list: "a list"}.get(kind, kind.__name__)


def _common_problems(config: dict[str, Any]) -> list[str]:
    found = []
    retry = config.get("retry")
    if isinstance(retry, dict):
        if set(retry) - {"max", "backoffMs"}:
            found.append("config.retry takes max and backoffMs only.")
        attempts, backoff = retry.get("max", 0), retry.get("backoffMs", 0)
        if not _int_between(attempts, 0, MAX_RETRIES):
            found.append(f"config.retry.max must be an integer from 0 to {MAX_RETRIES}.")
        if not _int_between(backoff, 0, MAX_BACKOFF_MS):
            found.append(f"config.retry.backoffMs must be an integer from 0 to {MAX_BACKOFF_MS}.")
    if config.get("onError") not in (None, "fail", "continue"):
        found.append('config.onError must be "fail" or "continue".')
    return found


def _int_between(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


class InputNode(NodeType):
    name = "input"
    label = "Input"
    help = "The input node passes the run's input on. A workflow has exactly one."

    async def run(self, node: Node, value: Any, ctx: RunContext) -> Any:
        return ctx.input


class LlmNode(NodeType):
    name = "llm"
    label = "LLM"
    config = {
        "prompt": ConfigKey((str,), required=True, label="Prompt", kind="textarea", default="${input}", rows=5,
                            description="${name} is that node's output; ${input} the run's input."),
        "model": ConfigKey((str,), label="Model", suggest="models", placeholder="the agent's model",
                           description="An alias or <connection>/<model> (Settings lists them); empty: the "
                                       "agent's model."),
        "agent": ConfigKey((str,), label="Agent", placeholder="default",
                           description="The slug of an agent the run's user may use (its instructions, tools and "
                                       "knowledge); empty: the agent `default`. Checked when the node runs."),
    }
    referencing = ("prompt",)

    async def run(self, node: Node, value: Any, ctx: RunContext) -> Any:
        slug = node.config.get("agent") or ""
        settings = await agent_settings(slug, ctx.owner_id) if slug else await aget_settings()
        if node.config.get("model"):
            settings = settings.with_overrides(model=node.config["model"])
        async for event in run_agent(messages=[Message("user", substitute(node.config["prompt"], ctx))],
                                     user_id=ctx.owner_id, settings=settings, is_admin=ctx.is_admin,
                                     caller=caller_for(ctx.owner_id, "workflow")):
            if event.type == "delta":
                ctx.emit("delta", {"node": node.name, "content": event.data["content"]})
            elif event.type == "error":
                raise _model_failure(event.data)
            elif event.type == "done":
                return event.data.get("content", "")
        raise NodeFailure("The agent stopped without an answer.")


async def agent_settings(slug: str, user_id: int) -> AgentSettings:
    """The settings of agent `slug` for the run's user (agentsite.agent.agents, the user's access checked now). An
    agent the user may not use (or none of that slug) fails the node, naming it, and is not retried."""
    try:
        return await db(_agent_settings_now, slug, user_id)
    except AppError as exc:
        if exc.code not in ("model_not_found", "not_found"):
            raise
        failure = NodeFailure(f"The agent {slug!r} does not exist or the run's user may not use it "
                              "(config.agent: the slug of an agent of GET /api/agents).")
        failure.retryable = False  # type: ignore[attr-defined]  # what workflows.engine.retryable reads
        raise failure from None


def _agent_settings_now(slug: str, user_id: int) -> AgentSettings:
    return agents.run_settings_now(get_user_model().objects.filter(pk=user_id, is_active=True).first(), slug)


def _model_failure(data: dict[str, Any]) -> NodeFailure:
    """The llm node's failure naming the error's code; a model the run's user may not use is not retried (a
    retry asks the same groups the same question)."""
    code = data.get("code", "upstream_error")
    failure = NodeFailure(f"The model failed ({code}): {data.get('message', '')}")
    if code == "model_not_allowed":
        failure.retryable = False  # type: ignore[attr-defined]  # what workflows.engine.retryable reads
    return failure


class ToolNode(NodeType):
    name = "tool"
    label = "Tool"
    config = {
        "toolName": ConfigKey((str,), required=True, label="Tool name", default="", suggest="tools"),
        "toolArgs": ConfigKey((dict,), label="Tool arguments (JSON)", kind="json", default={},
                              description="A JSON object; ${name} in a string is replaced by that node's output."),
    }
    referencing = ("toolArgs",)

    async def run(self, node: Node, value: Any, ctx: RunContext) -> Any:
        arguments = substitute_value(node.config.get("toolArgs") or {}, ctx)
        result = await registry.call(node.config["toolName"], arguments,
                                     ToolContext(user_id=ctx.owner_id, is_admin=ctx.is_admin))
        if result.is_error:
            raise NodeFailure(f"The tool {node.config['toolName']} failed: {result.text}")
        return result.text


class ConditionNode(NodeType):
    name = "condition"
    label = "Condition"
    config = {
        "condition": ConfigKey((str,), required=True, label="Condition (JavaScript expression)", kind="textarea",
                               default="input.length > 0", rows=2,
                               description="Sees input and context; true takes the true branch."),
        "trueBranch": ConfigKey((str,), label="True branch", kind="node"),
        "falseBranch": ConfigKey((str,), label="False branch", kind="node"),
    }

    def problems(self, node: Node, graph: Graph, compile_check: CompileCheck | None) -> list[str]:
        found = super().problems(node, graph, compile_check)
        ids = graph.by_id()
        branches = {node.config.get(key) for key in ("trueBranch", "falseBranch")} - {None}
        for key in ("trueBranch", "falseBranch"):
            target = node.config.get(key)
            if isinstance(target, str) and (target not in ids or target == node.id):
                found.append(f"config.{key} must be the id of another node ({target!r} is not).")
        for edge in graph.edges:
            if edge.source == node.id and edge.target not in branches:
                found.append(f"the edge to {edge.target!r} is neither its trueBranch nor its falseBranch, so it "
                             "could never be taken.")
        source = node.config.get("condition")
        if compile_check and isinstance(source, str) and (error := compile_check(source, "condition")):
            found.append(f"the condition does not compile: {error}")
        return found

    async def run(self, node: Node, value: Any, ctx: RunContext) -> Any:
        chosen = await sandbox_pool().run_condition(node.config["condition"], input=value, context=ctx.js_context(),
                                                    owner=ctx.owner_id, budget=ctx.sandbox_budget)
        target = node.config.get("trueBranch" if chosen else "falseBranch")
        return Routed(value, frozenset({target}) if target else frozenset())


class CodeNode(NodeType):
    name = "code"
    label = "Code (JavaScript)"
    config = {"code": ConfigKey((str,), required=True, label="Code (JavaScript function body)", kind="textarea",
                                default="return input;", rows=7,
                                description="The body of function (input, context); its return value is the "
                                            "output.")}

    def problems(self, node: Node, graph: Graph, compile_check: CompileCheck | None) -> list[str]:
        found = super().problems(node, graph, compile_check)
        source = node.config.get("code")
        if compile_check and isinstance(source, str) and (error := compile_check(source, "code")):
            found.append(f"the code does not compile: {error}")
        return found

    async def run(self, node: Node, value: Any, ctx: RunContext) -> Any:
        return await sandbox_pool().run_code(node.config["code"], input=value, context=ctx.js_context(),
                                             owner=ctx.owner_id, budget=ctx.sandbox_budget)


class DelayNode(NodeType):
    name = "delay"
    label = "Delay"
    config = {"delayMs": ConfigKey((int,), required=True, label="Delay (ms)", kind="integer", default=1000, min=0)}

    def problems(self, node: Node, graph: Graph, compile_check: CompileCheck | None) -> list[str]:
        found = super().problems(node, graph, compile_check)
        delay = node.config.get("delayMs")
        if isinstance(delay, int) and not _int_between(delay, 0, MAX_DELAY_MS):
            found.append(f"config.delayMs must be from 0 to {MAX_DELAY_MS}.")
        return found

    async def run(self, node: Node, value: Any, ctx: RunContext) -> Any:
        if node.config["delayMs"]:
            await asyncio.sleep(node.config["delayMs"] / 1000)
        return value


class OutputNode(NodeType):
    name = "output"
    label = "Output"
    config = {"outputFormat": ConfigKey((str,), label="Output format", kind="select", default="text",
                                        options=(("text", "Text"), ("markdown", "Markdown"), ("json", "JSON")))}

    def problems(self, node: Node, graph: Graph, compile_check: CompileCheck | None) -> list[str]:
        found = super().problems(node, graph, compile_check)
        formats = [value for value, _ in self.config["outputFormat"].options]
        if node.config.get("outputFormat", "text") not in formats:
            found.append(f"config.outputFormat must be one of {', '.join(formats)}.")
        return found

    async def run(self, node: Node, value: Any, ctx: RunContext) -> Any:
        return format_output(value, node.config.get("outputFormat", "text"))


def format_output(value: Any, output_format: str) -> Any:
    """text and markdown: the value as text; json: JSON text parsed (other text kept as a JSON string)."""
    if output_format != "json":
        return as_text(value)
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


MAX_APPROVAL_TIMEOUT_S = 90 * 24 * 3600
MAX_APPROVERS = 50


class ApprovalNode(NodeType):
    """A person decides: the run waits (`waiting`) until one of `approvers` (user names; none: the owner)
    approves or rejects, or `timeout_s` passes (then `on_timeout` decides). Its output is
    {decision: "approve"|"reject", comment, data, by} (by: the approver's name; null when it timed out)."""

    name = "approval"
    label = "Approval (a person decides)"
    config = {
        "prompt": ConfigKey((str,), label="Prompt", kind="textarea", default="Approve ${input}?", rows=3,
                            description="What the approvers are asked; ${name} is that node's output."),
        "approvers": ConfigKey((list,), label="Approvers", kind="names", placeholder="you (the owner)",
                               description="User names, separated by commas; empty: you."),
        "timeout_s": ConfigKey((int,), label="Timeout (s)", kind="integer", min=1, placeholder="none",
                               description=f"1-{MAX_APPROVAL_TIMEOUT_S}; empty: no timeout."),
        "on_timeout": ConfigKey((str,), label="On timeout", kind="select", default="reject",
                                options=(("reject", "Reject"), ("approve", "Approve"))),
    }
    referencing = ("prompt",)
    pauses = True

    def problems(self, node: Node, graph: Graph, compile_check: CompileCheck | None) -> list[str]:
        found = super().problems(node, graph, compile_check)
        approvers = node.config.get("approvers")
        if isinstance(approvers, list) and (len(approvers) > MAX_APPROVERS or not all(
                isinstance(item, str) and 0 < len(item) <= 150 for item in approvers)):
            found.append(f"config.approvers must be a list of at most {MAX_APPROVERS} user names.")
        timeout = node.config.get("timeout_s")
        if isinstance(timeout, int) and not _int_between(timeout, 1, MAX_APPROVAL_TIMEOUT_S):
            found.append(f"config.timeout_s must be from 1 to {MAX_APPROVAL_TIMEOUT_S}.")
        if node.config.get("on_timeout", "reject") not in ("reject", "approve"):
            found.append('config.on_timeout must be "reject" or "approve".')
        if "retry" in node.config:
            found.append("an approval node takes no retry (a person decides once).")
        return found

    def request(self, node: Node, value: Any, ctx: RunContext) -> dict[str, Any]:
        return {"prompt": substitute(node.config.get("prompt") or "", ctx),
                "approvers": list(node.config.get("approvers") or []),
                "timeout_s": node.config.get("timeout_s"), "on_timeout": node.config.get("on_timeout", "reject")}


NODE_TYPES: dict[str, NodeType] = {}


def register_node_type(kind: NodeType) -> None:
    """Add (or replace) a node type: saving, the engine and GET /api/meta all read NODE_TYPES."""
    NODE_TYPES[kind.name] = kind


def unregister_node_type(name: str) -> None:
    NODE_TYPES.pop(name, None)


def node_type(name: str) -> NodeType | None:
    return NODE_TYPES.get(name)


def describe_node_types() -> list[dict[str, Any]]:
    """Every node type, in the registry's order, as the node form draws it (GET /api/meta's `node_types`)."""
    return [kind.describe() for kind in NODE_TYPES.values()]


for _kind in (InputNode, LlmNode, ToolNode, ConditionNode, CodeNode, DelayNode, ApprovalNode, OutputNode):
    register_node_type(_kind())

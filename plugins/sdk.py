"""The plugin SDK: `@tool` turns a function into a tool of the registry.

    from plugins.sdk import tool

    @tool
    def reverse(text: str) -> str:
        '''Reverse a text.'''
        return text[::-1]

The input schema comes from the type hints (pydantic); a `ToolContext` parameter receives the caller. `define`
gives the rules.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

import pydantic
import pydantic_core
from pydantic.fields import FieldInfo

from agentsite.agent.tools import ToolContext, ToolError, ToolResult

__all__ = ["tool", "ToolContext", "ToolError", "ToolResult", "PluginError"]

# What the LLM providers accept as a function name (OpenAI's rule; Anthropic's is the same or wider).
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

_MARK = "__agentsite_tool__"


class PluginError(Exception):
    """A plugin cannot be loaded as written; the message says what to fix."""


@dataclass(frozen=True)
class ToolDefinition:
    name: str
    description: str
    input_schema: dict[str, Any]
    function: Callable[..., Any] = field(repr=False)
    arguments_model: type[pydantic.BaseModel] = field(repr=False)
    context_parameter: str | None = None
    line: int | None = None  # where the function is defined, for error messages

    async def __call__(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            parsed = self.arguments_model.model_validate(arguments)
        except pydantic.ValidationError as exc:
            raise ToolError(f"Invalid arguments for {self.name}: {_validation_message(exc)}") from None
        kwargs = {name: getattr(parsed, name) for name in type(parsed).model_fields}
        if self.context_parameter:
            kwargs[self.context_parameter] = ctx
        if inspect.iscoroutinefunction(self.function):
            value = await self.function(**kwargs)
        else:
            # A sync tool runs on a worker thread; past the registry's time limit its result is dropped (a
            # thread cannot be stopped), so a sync tool that may hang should bound its own waits.
            value = await asyncio.to_thread(functools.partial(self.function, **kwargs))
        return as_result(value)


def as_result(value: Any) -> ToolResult:
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, str):
        return ToolResult.of_text(value)
    try:
        return ToolResult.of_text(pydantic_core.to_json(value).decode())
    except pydantic_core.PydanticSerializationError as exc:
        raise ToolError(f"The tool's result cannot be turned into JSON: {exc}") from None


def tool(function: Callable[..., Any] | None = None, *, name: str | None = None,
         description: str | None = None) -> Any:
    """Declare a tool: `@tool`, or `@tool(name=..., description=...)`. See the module's contract."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        definition = define(func, name=name, description=description)
        setattr(func, _MARK, definition)
        _collected(definition)
        return func

    if function is not None:
        if not callable(function):
            raise PluginError("@tool takes a function, or name=/description= keywords.")
        return decorate(function)
    return decorate


def define(func: Callable[..., Any], *, name: str | None = None, description: str | None = None) -> ToolDefinition:
    """The tool definition of a function (raises PluginError naming what cannot become a schema).

    Contract:
    - The decorator returns the function unchanged (a plugin can still call it) and records a `ToolDefinition`
      on it; the loader collects the definitions made while it imports a plugin.
    - The input schema is derived from the signature with pydantic: every parameter needs a type hint (pydantic
      types, models, enums, `Literal`, defaults, `Annotated[T, Field(description=...)]` or `Annotated[T, "text"]`
      all work). A parameter annotated `ToolContext` is not part of the schema: it receives the caller (its
      `user_id`). `*args`, `**kwargs`, a missing hint or a type pydantic cannot describe raise `PluginError` at
      decoration time, so the plugin fails to load with that message and line.
    - A call validates the arguments with the same pydantic model (so a model parameter arrives as the model),
      runs the function (a sync one on a worker thread), and turns the return value into the tool's text: a
      string as is, a `ToolResult` unchanged, anything else as JSON. An exception is a tool error.
    """
    tool_name = name if name is not None else getattr(func, "__name__", "")
    line = getattr(getattr(func, "__code__", None), "co_firstlineno", None)
    where = f"the tool {tool_name!r}"
    if not isinstance(tool_name, str) or not TOOL_NAME.match(tool_name):
        raise PluginError(f"{where}: a tool name is 1-64 letters, digits, '_' or '-'.")
    if "__" in tool_name:
        raise PluginError(f"{where}: '__' is reserved for MCP servers' and workflows' tools (server__tool).")
    text = description if description is not None else inspect.getdoc(func) or ""
    if not text.strip():
        raise PluginError(f"{where}: give it a docstring or description= (the model reads it to choose tools).")
    try:
        signature = inspect.signature(func)
        hints = typing.get_type_hints(func, include_extras=True)
    except (NameError, TypeError, ValueError) as exc:
        raise PluginError(f"{where}: its type hints cannot be read: {exc}") from None
    fields: dict[str, Any] = {}
    context_parameter = None
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise PluginError(f"{where}: *args and **kwargs cannot become a schema; name each parameter.")
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise PluginError(f"{where}: the parameter {parameter.name!r} is positional-only; tools take keywords.")
        if parameter.name not in hints:
            raise PluginError(f"{where}: the parameter {parameter.name!r} has no type hint.")
        hint = hints[parameter.name]
        if hint is ToolContext or hint == ToolContext | None:
            context_parameter = parameter.name
            continue
        if parameter.name.startswith("_"):
            raise PluginError(f"{where}: the parameter {parameter.name!r} starts with '_', which pydantic ignores.")
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[parameter.name] = (_described(hint), default)
    try:
        model = pydantic.create_model(f"{tool_name}_arguments", __config__=pydantic.ConfigDict(extra="forbid"),
                                      **fields)
        schema = model.model_json_schema()
    except (pydantic.PydanticUserError, pydantic.errors.PydanticSchemaGenerationError, TypeError) as exc:
        raise PluginError(f"{where}: its parameters cannot become a JSON schema: {_first_line(exc)}") from None
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    schema.setdefault("properties", {})
    return ToolDefinition(tool_name, text.strip(), schema, func, model, context_parameter, line)


def _described(hint: Any) -> Any:
    """`Annotated[T, "text"]` as `Annotated[T, Field(description="text")]`; other hints unchanged."""
    if typing.get_origin(hint) is not Annotated:
        return hint
    base, *extras = typing.get_args(hint)
    converted = [FieldInfo(description=extra) if isinstance(extra, str) else extra for extra in extras]
    return Annotated[(base, *converted)]  # type: ignore[valid-type]


def _validation_message(exc: pydantic.ValidationError) -> str:
    return "; ".join(f"{'/'.join(map(str, error['loc'])) or '(root)'}: {error['msg']}" for error in exc.errors()[:5])


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def definition_of(func: Any) -> ToolDefinition | None:
    return getattr(func, _MARK, None)


# --- collecting the definitions made while a plugin is imported -----------------------------------------------
# The loader imports one plugin at a time (under its lock) inside `collecting()`; `@tool` outside it (a plugin
# module imported by ordinary code, a test) only marks the function.

_collector: list[ToolDefinition] | None = None


def _collected(definition: ToolDefinition) -> None:
    if _collector is not None:
        _collector.append(definition)


class collecting:
    """`with collecting() as found:` gathers every definition `@tool` makes in the block, in order."""

    def __enter__(self) -> list[ToolDefinition]:
        global _collector
        self._previous = _collector
        _collector = []
        return _collector

    def __exit__(self, *exc_info: object) -> None:
        global _collector
        _collector = self._previous

"""The tool registry: built-in, MCP and plugin tools behind one interface, listed and called for one caller.

The registry merges its sources, filters by the config's `tools` list, validates arguments against each tool's
schema, enforces each tool's time limit and turns every failure into an error result for the model. A tool the
caller may not use (outside an MCP server's access rule, or reserved for admins by AGENTSITE_ADMIN_ONLY_TOOLS) is
indistinguishable from one that does not exist. The built-in tools are registered when this module is imported.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from dataclasses import replace
from typing import Any

import jsonschema
from django.conf import settings
from django.contrib.auth import get_user_model

from agentsite.agent.builtin import builtin_tools
from agentsite.agent.config import AgentSettings, aget_settings
from agentsite.agent.tooltypes import (
    StaticToolSource,
    Tool,
    ToolCallable,
    ToolContext,
    ToolError,
    ToolResult,
    ToolSource,
)
from agentsite.core.dbcall import db
from agentsite.core.errors import AppError

__all__ = ["StaticToolSource", "Tool", "ToolCallable", "ToolContext", "ToolError", "ToolRegistry", "ToolResult",
           "ToolSource", "admin_only_tools", "call_tool", "registry", "resolve_caller", "validation_problem"]

logger = logging.getLogger(__name__)

# A tool's text result is cut here, so one fetch cannot fill the model's whole context.
MAX_RESULT_CHARS = 100_000


async def resolve_caller(ctx: ToolContext) -> ToolContext:
    """ctx with `is_admin` set: an admin is an active staff user (as the API's IsAdmin permission says)."""
    if ctx.is_admin is not None:
        return ctx
    if ctx.user_id is None:
        return replace(ctx, is_admin=False)
    return replace(ctx, is_admin=await db(_is_active_admin, ctx.user_id))


def _is_active_admin(user_id: int) -> bool:
    return get_user_model().objects.filter(pk=user_id, is_active=True, is_staff=True).exists()


# The screenshot shows the server's own display (whatever an admin has open on it): not every user's to see.
DEFAULT_ADMIN_ONLY_TOOLS = ("computer_screenshot",)


def admin_only_tools() -> frozenset[str]:
    """The tool names the operator reserved for admins (AGENTSITE_ADMIN_ONLY_TOOLS; the default without Django)."""
    if not settings.configured:
        return frozenset(DEFAULT_ADMIN_ONLY_TOOLS)
    return frozenset(getattr(settings, "AGENTSITE_ADMIN_ONLY_TOOLS", DEFAULT_ADMIN_ONLY_TOOLS))


class ToolRegistry:
    def __init__(self) -> None:
        # Replaced whole on every change (copy on write): a listing on the event loop iterates one snapshot
        # while a plugin watcher's thread registers or removes a source.
        self._sources: dict[str, ToolSource] = {}

    def register_source(self, source: ToolSource) -> None:
        """Add or replace the source with this name. Sources are asked in registration order, and the first
        tool of a name wins, so a built-in cannot be shadowed by a later source.
        """
        self._sources = {**self._sources, source.name: source}

    def unregister_source(self, name: str) -> None:
        self._sources = {key: source for key, source in self._sources.items() if key != name}

    def sources(self) -> list[str]:
        return list(self._sources)

    def describe_sources(self) -> list[dict[str, str]]:
        """The registered sources, in the order they are asked: {name, label} (GET /api/meta)."""
        return [{"name": name, "label": source.label or name} for name, source in self._sources.items()]

    def source(self, name: str) -> ToolSource | None:
        return self._sources.get(name)

    async def list_tools(self, ctx: ToolContext, settings: AgentSettings | None = None,
                         enabled_only: bool = True) -> list[Tool]:
        """Every source's tools for this caller (those the settings enable, unless enabled_only is False),
        first name wins.
        """
        if enabled_only and settings is None:
            settings = await aget_settings()
        ctx = await resolve_caller(ctx)
        listed = await asyncio.gather(*(self._list_source(source, ctx) for source in self._sources.values()))
        return self._merged(listed, settings if enabled_only else None)

    def list_tools_now(self, ctx: ToolContext, settings: AgentSettings) -> list[Tool] | None:
        """list_tools (enabled only) for a resolved caller, from every source's list_tools_now, in this thread (a
        database thread: sources read the database); None when a source cannot list that way, or ctx is not
        resolved."""
        if ctx.is_admin is None:
            return None
        listed = []
        for source in list(self._sources.values()):
            try:
                tools = source.list_tools_now(ctx)
            except Exception:
                logger.exception("Tool source %r could not list its tools", source.name)
                tools = []
            if tools is None:
                return None
            listed.append(self._allowed(tools, ctx))
        return self._merged(listed, settings)

    def _merged(self, listed: list[list[Tool]], settings: AgentSettings | None) -> list[Tool]:
        """The sources' listings as one: first name wins; only the tools the settings enable (None: all)."""
        tools: dict[str, Tool] = {}
        for source_tools in listed:
            for tool in source_tools:
                if tool.name in tools:
                    logger.warning("Tool %r from %r is shadowed by the one from %r", tool.name, tool.source,
                                   tools[tool.name].source)
                    continue
                if settings is None or settings.tool_enabled(tool.name):
                    tools[tool.name] = tool
        return list(tools.values())

    async def _list_source(self, source: ToolSource, ctx: ToolContext) -> list[Tool]:
        """The source's tools for this (resolved) caller, less those reserved for admins."""
        try:
            tools = await source.list_tools(ctx)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("Tool source %r could not list its tools", source.name)
            return []
        return self._allowed(tools, ctx)

    @staticmethod
    def _allowed(tools: list[Tool], ctx: ToolContext) -> list[Tool]:
        """The tools less those reserved for admins, unless the (resolved) caller is one."""
        if ctx.is_admin:
            return tools
        reserved = admin_only_tools()
        return [tool for tool in tools if tool.name not in reserved]

    async def get(self, name: str, ctx: ToolContext) -> Tool | None:
        """The tool of this name for this caller, enabled or not. Sources are asked in order and only until
        one has it, so a built-in is found without listing (and perhaps connecting to) every MCP server.
        """
        ctx = await resolve_caller(ctx)
        for source in list(self._sources.values()):
            found = next((tool for tool in await self._list_source(source, ctx) if tool.name == name), None)
            if found is not None:
                return found
        return None

    async def call(self, name: str, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Run the tool of this name (enabled or not: callers that care check first). Never raises but
        CancelledError: an unknown tool, bad arguments, a timeout or a failure come back as an error result.
        """
        ctx = await resolve_caller(ctx)
        tool = await self.get(name, ctx)
        if tool is None:
            return ToolResult.error(f"There is no tool named {name!r}.")
        return await call_tool(tool, arguments, ctx)


async def call_tool(tool: Tool, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Validate, run with the tool's time limit, and turn failures into error results (see ToolRegistry.call)."""
    problem = validation_problem(tool, arguments)
    if problem:
        return ToolResult.error(f"Invalid arguments for {tool.name}: {problem}")
    try:
        async with asyncio.timeout(tool.timeout):
            result = await tool.call(arguments, ctx)
    except TimeoutError:
        logger.warning("Tool %r timed out after %g s", tool.name, tool.timeout)
        return ToolResult.error(f"The tool {tool.name} did not finish within {tool.timeout:g} seconds.")
    except (ToolError, AppError) as exc:
        logger.info("Tool %r failed: %s", tool.name, exc)
        return ToolResult.error(str(exc))
    except Exception as exc:  # a boundary: whatever a tool (a plugin, an MCP server) raises goes back as text
        logger.exception("Tool %r raised", tool.name)
        return ToolResult.error(f"The tool {tool.name} failed: {type(exc).__name__}: {exc}")
    if not isinstance(result, ToolResult):
        logger.error("Tool %r returned %s, not a ToolResult", tool.name, type(result).__name__)
        return ToolResult.error(f"The tool {tool.name} returned something that is not a tool result.")
    return _capped(result)


def validation_problem(tool: Tool, arguments: dict[str, Any]) -> str | None:
    """What is wrong with these arguments for this tool's input schema (None when they are valid)."""
    if not isinstance(arguments, dict):
        return "the arguments must be a JSON object."
    validator = _validator(json.dumps(tool.input_schema, sort_keys=True))
    if validator is None:
        # A broken schema is the tool author's bug (often an MCP server's); the tool itself still decides.
        logger.warning("Tool %r has an invalid input schema; its arguments are not validated", tool.name)
        return None
    errors = sorted(validator.iter_errors(arguments), key=lambda error: list(map(str, error.path)))
    if not errors:
        return None
    return "; ".join(f"{'/'.join(map(str, error.path)) or '(root)'}: {error.message}" for error in errors[:5])


@functools.lru_cache(maxsize=512)
def _validator(schema_json: str) -> Any:
    # Keyed by the schema's text: checking a schema against its meta-schema costs more than the call itself.
    schema = json.loads(schema_json)
    validator_class = jsonschema.validators.validator_for(schema)
    try:
        validator_class.check_schema(schema)
    except jsonschema.SchemaError:
        return None
    return validator_class(schema)


def _capped(result: ToolResult) -> ToolResult:
    blocks = []
    for block in result.content:
        text = block.get("text") if block.get("type") == "text" else None
        if isinstance(text, str) and len(text) > MAX_RESULT_CHARS:
            block = {**block, "text": text[:MAX_RESULT_CHARS] + f"\n[... cut at {MAX_RESULT_CHARS} characters]"}
        blocks.append(block)
    return ToolResult(blocks, result.is_error)


registry = ToolRegistry()
registry.register_source(StaticToolSource("builtin", builtin_tools, label="Built-in"))

"""The tool types the registry (agentsite/agent/tools.py) and every tool source share: a tool, its caller,
its result, a source. Apart from the registry, so the built-in tools import these without importing it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentsite.agent.types import ToolSpec

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

# A tool call's progress line, while it runs: the agent loop sets a reporter for each call it runs (the chat
# stream shows what it is told as `tool_progress`); anywhere else reporting does nothing.
_progress: ContextVar[Callable[[str], None] | None] = ContextVar("agentsite_tool_progress", default=None)
PROGRESS_MAX_CHARS = 1000


def report_progress(text: str) -> None:
    """Tell whoever runs this tool call how it is getting on (a line of text, cut to PROGRESS_MAX_CHARS). Cheap,
    never raises, and a no-op outside a run that listens; a tool reports only what changed, not every byte."""
    reporter = _progress.get()
    if reporter is not None and text:
        reporter(text if len(text) <= PROGRESS_MAX_CHARS else text[:PROGRESS_MAX_CHARS - 1] + "…")


def listen_progress(reporter: Callable[[str], None] | None) -> None:
    """The reporter of the tool call running in this context (the agent loop's, per call task)."""
    _progress.set(reporter)


@dataclass(frozen=True)
class ToolContext:
    """The caller a tool is listed for and runs for.

    `user_id` is None for a caller with no user (it sees only what needs no user). `is_admin` None means
    not looked up yet: the registry resolves it before asking any source (`resolve_caller`); a context
    built without it is never treated as an admin's.
    """

    user_id: int | None = None
    is_admin: bool | None = None

    @classmethod
    def for_user(cls, user: AbstractUser) -> ToolContext:
        """The context of an authenticated Django user (a request's), resolved without a query."""
        return cls(user_id=user.pk, is_admin=bool(user.is_active and user.is_staff))


@dataclass
class ToolResult:
    """MCP-shaped content blocks: {"type": "text", "text"} and {"type": "image", "data": <base64>, "mimeType"}."""

    content: list[dict[str, Any]] = field(default_factory=list)
    is_error: bool = False

    @classmethod
    def of_text(cls, text: str) -> ToolResult:
        return cls([{"type": "text", "text": text}])

    @classmethod
    def error(cls, message: str) -> ToolResult:
        return cls([{"type": "text", "text": message}], is_error=True)

    @property
    def text(self) -> str:
        """The text blocks joined; an image shows as a placeholder naming its type."""
        parts = []
        for block in self.content:
            if block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            elif block.get("type") == "image":
                parts.append(f"[image: {block.get('mimeType', 'image')}]")
        return "\n".join(parts)

    def __repr__(self) -> str:
        return f"ToolResult(is_error={self.is_error}, text={self.text[:80]!r})"


class ToolError(Exception):
    """Raised by a tool for a failure the model should read (a refused URL, no display); logged without a trace."""


ToolCallable = Callable[[dict[str, Any], ToolContext], Awaitable[ToolResult]]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_schema: dict[str, Any]
    call: ToolCallable = field(repr=False, compare=False)
    source: str = "builtin"
    timeout: float = 30.0

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.input_schema)


class ToolSource:
    """A named set of tools. `list_tools(ctx)` returns the tools this caller may see and call, and no other:
    the registry offers, finds and runs only what it returns (ctx is resolved: `ctx.is_admin` is a bool).
    It may do I/O (an MCP server); it should raise only when it cannot list at all, and the registry then
    leaves the source out for that listing (logged).
    """

    name: str = ""
    label: str = ""  # how the dashboard names it (GET /api/meta); empty: its name

    async def list_tools(self, ctx: ToolContext) -> list[Tool]:
        raise NotImplementedError

    def list_tools_now(self, ctx: ToolContext) -> list[Tool] | None:
        """list_tools without waiting on anything but the database (sync, called on a database thread), or None
        when this listing needs more (an MCP server to connect): the registry then lists asynchronously. A
        chat turn lists the tools this way in the one database call that reads its session."""
        return None


class StaticToolSource(ToolSource):
    """A fixed list of tools (the built-ins, a plugin, a test)."""

    def __init__(self, name: str, tools: list[Tool] | Callable[[], list[Tool]], label: str = ""):
        self.name = name
        self.label = label
        self._tools = tools

    def tools(self) -> list[Tool]:
        return list(self._tools() if callable(self._tools) else self._tools)

    async def list_tools(self, ctx: ToolContext) -> list[Tool]:
        return self.tools()

    def list_tools_now(self, ctx: ToolContext) -> list[Tool] | None:
        # A subclass that lists its own way (an overridden list_tools) is asked that way.
        return self.tools() if type(self).list_tools is StaticToolSource.list_tools else None

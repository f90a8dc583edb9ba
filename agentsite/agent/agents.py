"""Named agents as the runtime sees them: `agent:<slug>[@<version>]` resolved to the settings a run uses.

The runtime imports no facet: the agents app registers an `AgentDirectory` in its ready(); without one, `agent`
and `agent:default` are the global settings and nothing else exists. A directory's `resolve_now(user, name)` (sync,
on a database thread) returns the `ResolvedAgent`, or raises AppError 404 `model_not_found` when the caller may not
use it, there is none, or the pinned version does not exist (which of these is never told); `peek` answers the
same without any I/O, or None when it cannot; `names_now(user)` lists `agent:<slug>` for each agent the caller
may use. A resolved agent's settings are the deployment's with the agent's instructions, model, sampling, tools
and knowledge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentsite.agent.config import AgentSettings, get_settings
from agentsite.core.dbcall import db
from agentsite.core.errors import AppError

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

PREFIX = "agent:"
PLAIN = "agent"  # the /v1 model that has always meant the deployment's agent: the agent `default`
DEFAULT_SLUG = "default"
SLUG_PATTERN = re.compile(r"^[a-z0-9_-]{1,64}$")

# An allowlist names a workflow `workflow:<name>` and an MCP server's tool `<server>/<tool>`; the model sees
# function names, which allow neither ':' nor '/' and at most 64 characters at OpenAI and most others.
WORKFLOW_PREFIX = "workflow:"
WORKFLOW_FUNCTION_PREFIX = "workflow__"
MCP_SEPARATOR = "__"
MAX_FUNCTION_NAME = 64
_NOT_IN_FUNCTION_NAME = re.compile(r"[^A-Za-z0-9_-]")


def mcp_function_name(server: str, tool: str) -> str:
    """The function name the model sees for an MCP server's tool: `<server>__<tool>` (characters a function name
    cannot hold as `_`), cut at 64."""
    return (server + MCP_SEPARATOR + _NOT_IN_FUNCTION_NAME.sub("_", tool))[:MAX_FUNCTION_NAME]


def workflow_function_name(name: str) -> str:
    return (WORKFLOW_FUNCTION_PREFIX + name)[:MAX_FUNCTION_NAME]


def function_name(entry: str) -> str:
    """The function name an allowlist entry means: `workflow:<name>` and `<server>/<tool>` as above, `*` and
    a built-in's or a plugin's name as they are."""
    if entry.startswith(WORKFLOW_PREFIX):
        return workflow_function_name(entry[len(WORKFLOW_PREFIX):])
    if "/" in entry:
        server, tool = entry.split("/", 1)
        return mcp_function_name(server, tool)
    return entry


def parse(name: str) -> tuple[str, int | None] | None:
    """(slug, version or None) of a model name that names an agent (`agent`, `agent:<slug>`, `agent:<slug>@<n>`),
    else None. A malformed slug or version is returned as it is (and then names no agent: 404)."""
    if name == PLAIN:
        return DEFAULT_SLUG, None
    if not name.startswith(PREFIX):
        return None
    rest = name[len(PREFIX):]
    slug, at, number = rest.partition("@")
    if not at:
        return slug, None
    version = int(number) if number.isascii() and number.isdigit() and 0 < len(number) < 10 else -1
    return slug, version


def is_agent_model(name: str) -> bool:
    return parse(name) is not None


def access_names(model: str) -> tuple[str, ...]:
    """The names a group's model list may allow an agent by: `agent` and `agent:default` are each other, and a
    pinned `agent:<slug>@<n>` is also `agent:<slug>` (so `agent:*` allows every agent)."""
    parsed = parse(model)
    if parsed is None:
        return (model,)
    names = (model, f"{PREFIX}{parsed[0]}")
    return tuple(dict.fromkeys((*names, PLAIN) if parsed[0] == DEFAULT_SLUG else names))


@dataclass(frozen=True)
class ResolvedAgent:
    slug: str
    version: int  # the version whose fields these are (the latest unless the name pinned one)
    owner_id: int | None  # None: the deployment's (the agent `default`)
    settings: AgentSettings


class AgentDirectory:
    def resolve_now(self, user: AbstractBaseUser | None, name: str) -> ResolvedAgent:
        raise NotImplementedError

    def peek(self, user: AbstractBaseUser | None, name: str) -> ResolvedAgent | None:
        return None

    def names_now(self, user: AbstractBaseUser | None) -> list[str]:
        raise NotImplementedError


class _GlobalOnly(AgentDirectory):
    """No agents app: `agent` and `agent:default` are the global settings; nothing else exists."""

    def resolve_now(self, user: AbstractBaseUser | None, name: str) -> ResolvedAgent:
        if parse(name) != (DEFAULT_SLUG, None):
            raise not_found(name)
        return ResolvedAgent(DEFAULT_SLUG, 0, None, get_settings())

    def names_now(self, user: AbstractBaseUser | None) -> list[str]:
        return []


_directory: AgentDirectory = _GlobalOnly()


def register_directory(directory: AgentDirectory | None) -> None:
    """The agents app's directory (None: back to the global settings only, for tests)."""
    global _directory
    _directory = directory or _GlobalOnly()


def directory() -> AgentDirectory:
    return _directory


def not_found(name: str) -> AppError:
    return AppError("model_not_found", f"The model {name!r} does not exist or you do not have access to it.", 404)


async def aresolve(user: AbstractBaseUser | None, name: str) -> ResolvedAgent:
    """resolve_now from async code: a cached answer costs no thread crossing."""
    found = _directory.peek(user, name)
    if found is not None:
        return found
    return await db(_directory.resolve_now, user, name)


def resolve_now(user: AbstractBaseUser | None, name: str) -> ResolvedAgent:
    return _directory.resolve_now(user, name)


def run_settings_now(user: AbstractBaseUser | None, slug: str) -> AgentSettings:
    """The settings a run of agent `slug` (not pinned) uses for `user`, where a run names an agent by its slug (a
    chat session, a scheduled task, a workflow's llm node); sync, on a database thread. The agent `default`'s are
    the runtime's own settings (its fields are the config's), so a swapped settings loader applies; usage is
    recorded with the agent as for any other. AppError 404 `model_not_found` as resolve_now."""
    if not SLUG_PATTERN.match(slug):
        raise not_found(slug)
    resolved = resolve_now(user, f"{PREFIX}{slug}")
    if resolved.slug == DEFAULT_SLUG:
        # The collections an admin lists on `default` come with it (read with the caller's rights): the global
        # settings know only the caller's personal collection.
        return get_settings().with_overrides(agent=DEFAULT_SLUG, knowledge=resolved.settings.knowledge)
    return resolved.settings


def names_now(user: AbstractBaseUser | None) -> list[str]:
    return _directory.names_now(user)


__all__ = ["DEFAULT_SLUG", "PLAIN", "PREFIX", "SLUG_PATTERN", "AgentDirectory", "ResolvedAgent", "access_names",
           "aresolve", "directory", "function_name", "is_agent_model", "mcp_function_name", "names_now", "not_found",
           "parse", "register_directory", "resolve_now", "run_settings_now", "workflow_function_name"]

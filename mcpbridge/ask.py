"""`ask_<slug> {message}`: each named agent the caller may use, as a tool of this service's MCP server.

A call runs the agent loop with the agent's settings (its instructions, model, tools and knowledge) as the MCP
caller: their tools' access, their budget and their key's (facet `mcp`), usage recorded with the agent. The
loop lists the agent's own tools as on every door: the server's own_tools_only rule is about its listing, not
what an agent it runs may use. Listed: the agents the caller may use (agents.names_now) whose `agent:<slug>`
their groups' model lists allow (as /v1/models). A call finds the agent by the name it spells, as /v1 does; one
the caller may not use is a tool error `not_found`, as for no agent. Nothing is kept between requests.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from agentsite.agent import agents, modelaccess
from agentsite.agent.loop import run_agent
from agentsite.agent.tools import ToolContext, ToolResult
from agentsite.agent.types import MAX_MESSAGE_CHARS, Message
from agentsite.agent.usage import Caller
from agentsite.core.dbcall import db
from agentsite.core.errors import AppError
from mcpbridge.selectors import principal

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

PREFIX = "ask_"
# Tool names: at most 64 characters (what OpenAI's and Anthropic's function names allow, so that a client
# handing these tools to its own model can). `ask_` and a slug of up to 60 fit as they are; a longer slug is cut
# and ends with 8 hex digits of its hash, so that two long slugs sharing a beginning still differ.
MAX_NAME = 64
_DIGEST = 8

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"message": {"type": "string", "minLength": 1, "maxLength": MAX_MESSAGE_CHARS,
                               "description": "What to ask the agent: one user message."}},
    "required": ["message"],
    "additionalProperties": False,
}


def tool_name(slug: str) -> str:
    """The tool name of the agent `slug` (at most MAX_NAME characters)."""
    name = PREFIX + slug
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(slug.encode()).hexdigest()[:_DIGEST]
    return f"{name[:MAX_NAME - _DIGEST - 1]}_{digest}"


def description(slug: str) -> str:
    return (f"Ask the agent '{slug}' (the model agent:{slug} on /v1): it answers with its own instructions, model, "
            "tools and knowledge, as you. Input: a message; output: its reply.")


async def usable_slugs(ctx: ToolContext, caller: Caller) -> list[str]:
    """The slugs of the agents this (resolved) caller may use and whose name their groups allow, by slug."""
    return await _usable(await db(principal, ctx), caller)


async def _usable(user: AbstractBaseUser | None, caller: Caller) -> list[str]:
    if user is None:
        return []
    names = await db(agents.names_now, user)
    return [name[len(agents.PREFIX):] for name in await modelaccess.allowed_names(caller, names)]


async def ask(name: str, arguments: dict[str, Any], ctx: ToolContext, caller: Caller) -> ToolResult:
    """Run the agent behind the tool `name` on `arguments["message"]` for this (resolved) caller; its reply text,
    or an error result naming the code: `not_found` (no such agent for this caller), `model_not_allowed` (their
    groups' model lists), `invalid` or `message_too_long` (the message), a budget's refusal, the upstream's
    failure. An agent is found by its name as on /v1 (an admin may ask any agent, listed or not), a cut name
    among those listed for the caller."""
    user = await db(principal, ctx)  # the user as the credential acts: an API key without `admin` is no admin
    slug = await _slug_of(name, user, caller)
    try:
        if slug is None:
            raise agents.not_found(name)
        model = agents.PREFIX + slug
        resolved = await agents.aresolve(user, model)
        await modelaccess.require(caller, agents.access_names(model))
    except AppError as exc:
        if exc.code == "model_not_found":  # the same answer whether the agent exists or not
            return ToolResult.error(f"not_found: no agent answers to the tool {name!r} for you; tools/list lists "
                                    "the agents you may ask.")
        return ToolResult.error(f"{exc.code}: {exc.message}")
    message = arguments.get("message")
    if not isinstance(message, str) or not message.strip():
        return ToolResult.error("invalid: message: a non-empty string is required (what to ask the agent).")
    if len(message) > MAX_MESSAGE_CHARS:
        return ToolResult.error(f"message_too_long: message: at most {MAX_MESSAGE_CHARS} characters (this one has "
                                f"{len(message)}).")
    return await _run(resolved.settings, message, ctx, caller)


async def _slug_of(name: str, user: AbstractBaseUser | None, caller: Caller) -> str | None:
    """The slug a tool name means: the one it spells (`ask_<slug>`); a name of MAX_NAME characters may instead be
    the cut name of a listed agent, which wins."""
    spelled = name[len(PREFIX):]
    spells = agents.SLUG_PATTERN.match(spelled) is not None and tool_name(spelled) == name
    if spells and len(name) < MAX_NAME:
        return spelled
    listed = {tool_name(slug): slug for slug in await _usable(user, caller)}
    return listed.get(name, spelled if spells else None)


async def _run(settings: Any, message: str, ctx: ToolContext, caller: Caller) -> ToolResult:
    reply = ""
    async for event in run_agent(messages=[Message("user", message)], user_id=ctx.user_id, settings=settings,
                                 use_tools=ctx.user_id is not None, caller=caller, is_admin=ctx.is_admin):
        if event.type == "done":
            reply = str(event.data.get("content", ""))
        elif event.type == "error":
            return ToolResult.error(f"{event.data.get('code', 'upstream_error')}: {event.data.get('message', '')}")
    return ToolResult.of_text(reply)

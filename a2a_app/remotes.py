"""The tool source `a2a`: each remote A2A agent whose access rule lets the caller in is the tool `a2a_<name>`
(input `{message}`; output the text of the remote's final answer; a failure is an error result, a2a_app.calls).

Listing reads the database only (the card was fetched when the remote was registered), so a chat turn lists these
tools in its one database call; a caller outside a remote's rule gets no such tool, and a call of it is "There is
no tool named ..." as for any tool not listed. Where no remote is registered, which a process knows without a
query while announcements reach it (any_remote), listing is no query at all.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from a2a_app.models import A2ARemote
from a2a_app.selectors import remote_spec, remotes_usable_by
from agentsite.agent.tooltypes import Tool, ToolContext, ToolResult, ToolSource
from agentsite.core.dbcall import db
from agentsite.core.kept import Kept

SOURCE_NAME = "a2a"
TOOL_PREFIX = "a2a_"
MAX_MESSAGE_CHARS = 32_000
MAX_DESCRIPTION_CHARS = 1_000
# Beyond the call's own limit: the cancel of a timed-out task (calls.CANCEL_TIMEOUT_S) and a margin, so that the
# call's own `timeout` error answers rather than the registry's.
EXTRA_TIMEOUT_S = 10.0
REMOTES_TOPIC = "a2a.remotes"  # announced when a remote is saved or deleted (a2a_app.apps)
ANY_REMOTE_TTL_S = 60.0  # bounds a change no signal saw (a bulk_create)

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"message": {"type": "string", "minLength": 1, "maxLength": MAX_MESSAGE_CHARS,
                               "description": "What to ask or tell the remote agent, as a user would."}},
    "required": ["message"],
    "additionalProperties": False,
}


def call_timeout_s() -> float:
    """AGENTSITE_A2A_TIMEOUT_S, read on every call (a changed setting applies at once)."""
    return float(getattr(settings, "AGENTSITE_A2A_TIMEOUT_S", 120.0))


def tool_name(remote_name: str) -> str:
    return TOOL_PREFIX + remote_name


def _description(remote: A2ARemote) -> str:
    card = remote.card or {}
    skills = "; ".join(f"{skill.get('name', '')}: {skill.get('description', '')}" for skill in card.get("skills", []))
    text = (f"Ask the remote A2A agent {card.get('name') or remote.name!r}. {card.get('description', '')}"
            + (f" Skills: {skills}" if skills else ""))
    return text[:MAX_DESCRIPTION_CHARS]


def remote_tool(remote: A2ARemote) -> Tool:
    remote_id = remote.pk

    async def call(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        # Start-up cost: the SDK's client (and starlette under it) is imported on the first call only.
        from a2a_app.calls import remote_call

        # Read again: a remote removed, its headers or its rule changed since the listing count from this call.
        found = await db(lambda: remotes_usable_by(ctx).filter(pk=remote_id).first())
        if found is None:
            return ToolResult.error(f"There is no tool named {tool_name(remote.name)!r}.")
        spec = await db(remote_spec, found)
        return await remote_call(spec, str(arguments["message"]), timeout=call_timeout_s())

    return Tool(name=tool_name(remote.name), description=_description(remote), input_schema=INPUT_SCHEMA, call=call,
                source=SOURCE_NAME, timeout=call_timeout_s() + EXTRA_TIMEOUT_S)


class A2AToolSource(ToolSource):
    name = SOURCE_NAME
    label = "Remote A2A agents"

    async def list_tools(self, ctx: ToolContext) -> list[Tool]:
        return await db(self._tools, ctx)

    def list_tools_now(self, ctx: ToolContext) -> list[Tool] | None:
        return self._tools(ctx)

    @staticmethod
    def _tools(ctx: ToolContext) -> list[Tool]:
        if not any_remote.get():
            return []
        return [remote_tool(remote) for remote in remotes_usable_by(ctx)]


# Whether any remote agent is registered: every chat turn lists the tools, and most deployments have none, which
# then costs no query (the caller's user and the remotes were two). Each save and delete of a remote calls
# any_remote.changed() (a2a_app.apps).
any_remote: Kept[bool] = Kept(REMOTES_TOPIC, lambda _key: A2ARemote.objects.exists(), ttl=ANY_REMOTE_TTL_S)

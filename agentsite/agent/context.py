"""Context sources: facets (the knowledge base) add text to the prompt for the latest user message.

A source is an async callable taking a ContextRequest and returning a ContextBlock or None. Facets
register theirs in AppConfig.ready(); the agent loop asks every registered source on each turn.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from agentsite.agent.config import AgentSettings


@dataclass(frozen=True)
class ContextRequest:
    user_id: Any  # the owner whose data may be used; None for anonymous callers
    query: str  # the latest user message's text
    settings: AgentSettings


@dataclass
class ContextBlock:
    text: str  # inserted into the prompt as is
    sources: list[dict[str, Any]] = field(default_factory=list)  # recorded on the assistant message


ContextSource = Callable[[ContextRequest], Awaitable[ContextBlock | None]]

_sources: dict[str, ContextSource] = {}


def register_context_source(name: str, source: ContextSource) -> None:
    _sources[name] = source


def unregister_context_source(name: str) -> None:
    _sources.pop(name, None)


def context_sources() -> dict[str, ContextSource]:
    return dict(_sources)

"""Context sources: facets (the knowledge base) add text to the prompt for the latest user message.

A source is an async callable taking a ContextRequest and returning a ContextBlock or None. Facets
register theirs in AppConfig.ready(); the agent loop asks every registered source on each turn. A source may
also register a sync variant (`now`: the same answer, reading only the database, called on a database thread):
a chat turn then asks it in the one database call that reads its session (agentsite.agent.loop.prepare_now).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from agentsite.agent.config import AgentSettings


@dataclass(frozen=True)
class ContextRequest:
    user_id: int | None  # the owner whose data may be used; None for anonymous callers
    query: str  # the latest user message's text
    settings: AgentSettings


@dataclass
class ContextBlock:
    text: str  # inserted into the prompt as is
    sources: list[dict[str, Any]] = field(default_factory=list)  # recorded on the assistant message


ContextSource = Callable[[ContextRequest], Awaitable[ContextBlock | None]]
ContextSourceNow = Callable[[ContextRequest], ContextBlock | None]

_sources: dict[str, ContextSource] = {}
_now: dict[str, ContextSourceNow] = {}


def register_context_source(name: str, source: ContextSource, now: ContextSourceNow | None = None) -> None:
    _sources[name] = source
    if now is None:
        _now.pop(name, None)
    else:
        _now[name] = now


def unregister_context_source(name: str) -> None:
    _sources.pop(name, None)
    _now.pop(name, None)


def context_sources_now() -> dict[str, ContextSourceNow] | None:
    """Every source's sync variant, or None when a source has none (the loop then asks them asynchronously)."""
    sources, now = dict(_sources), dict(_now)
    if any(name not in now for name in sources):
        return None
    return {name: now[name] for name in sources}


def context_sources() -> dict[str, ContextSource]:
    return dict(_sources)


def context_source_now(name: str) -> ContextSourceNow | None:
    """The sync variant registered with a source, if any (to register the source again as it was)."""
    return _now.get(name)


# How the loop hands context to the model: one block in the system prompt, fenced so that a model (and the
# offline provider, which answers from it) can tell reference material from instructions.
REFERENCE_START = "<reference>"
REFERENCE_END = "</reference>"
REFERENCE_INTRO = ("Reference material for the user's latest message follows. It was retrieved from the user's "
                   "own documents; use it when it is relevant and name its [source] when you do.")


def format_reference(blocks: list[ContextBlock]) -> str:
    """The system-prompt section for these blocks ("" when none has text)."""
    texts = [block.text.strip() for block in blocks if block.text and block.text.strip()]
    if not texts:
        return ""
    return f"{REFERENCE_INTRO}\n{REFERENCE_START}\n" + "\n\n".join(texts) + f"\n{REFERENCE_END}"


def reference_in(system_text: str) -> str:
    """The reference material inside a system prompt built with format_reference ("" when there is none)."""
    start = system_text.find(REFERENCE_START)
    end = system_text.rfind(REFERENCE_END)
    if start < 0 or end < start:
        return ""
    return system_text[start + len(REFERENCE_START):end].strip()

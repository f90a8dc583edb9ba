"""The agent's settings as the runtime sees them, and the hook a facet uses to supply them.

The runtime imports no facet app: `accounts` registers a loader in its AppConfig.ready() that reads
the config singleton. Without one (runtime tests), the defaults below apply.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from agentsite.core.dbcall import db


@dataclass(frozen=True)
class AgentSettings:
    provider: str = "offline"  # a name of agentsite.agent.providers.PROVIDERS
    base_url: str = ""  # empty: the provider's public endpoint
    api_key: str = field(default="", repr=False)  # never logged: repr hides it
    model: str = ""  # empty: the provider's default model
    system_prompt: str = "You are a helpful assistant."
    temperature: float = 0.7
    max_tokens: int = 1024
    tools: tuple[str, ...] = ("*",)
    kb_enabled: bool = True
    kb_top_k: int = 5
    kb_max_chars: int = 4000
    # The knowledge searched for context on each turn: the caller's own personal collection (`kb_personal`, the
    # agent `default`'s way) and the collections `knowledge` names (ids), read with `knowledge_reader`'s rights
    # (the agent's owner; None: the caller's). kb_enabled False searches nothing.
    kb_personal: bool = True
    knowledge: tuple[str, ...] = ()
    knowledge_reader: int | None = None
    # The named agent these settings are ("" outside one): usage is recorded with it.
    agent: str = ""
    # Seconds an upstream LLM may stay silent (connect, or between two bytes of a stream) before it fails.
    request_timeout: float = 120.0
    # The model catalogue (agentsite.agent.routing.Catalogue): connections and aliases. None: one connection made
    # of provider/base_url/api_key/model above. `model` names an alias, an entry `<connection>/<model>`, or a
    # bare model of the default connection.
    catalogue: Any = field(default=None, repr=False, compare=False)

    def with_overrides(self, **changes: Any) -> AgentSettings:
        """A copy with `changes`. Overriding the upstream itself (provider, base_url or api_key) leaves the
        catalogue behind: the copy answers from that one upstream (the connection `default`, as settings
        without a catalogue do); any other change (`model` included) keeps it."""
        if self.catalogue is not None and {"provider", "base_url", "api_key"} & set(changes):
            changes = {**changes, "catalogue": None}
        return replace(self, **changes)

    def tool_enabled(self, name: str) -> bool:
        return "*" in self.tools or name in self.tools


_loader: Callable[[], AgentSettings] | None = None
_peek: Callable[[], AgentSettings | None] | None = None


def set_settings_loader(loader: Callable[[], AgentSettings] | None,
                        peek: Callable[[], AgentSettings | None] | None = None) -> None:
    """`loader()` returns the settings (sync, may read the database); `peek()`, when given, returns them only
    if it can without any I/O (a fresh cached copy), else None, so async code skips a thread crossing."""
    global _loader, _peek
    _loader, _peek = loader, peek


def settings_loader() -> Callable[[], AgentSettings] | None:
    """The loader now registered (so a test can put it back after swapping in its own)."""
    return _loader


def settings_peek() -> Callable[[], AgentSettings | None] | None:
    """The peek now registered (put it back with the loader: `set_settings_loader(loader, peek)`)."""
    return _peek


def get_settings() -> AgentSettings:
    """The current settings (sync: from async code, await `aget_settings()`)."""
    return _loader() if _loader else AgentSettings()


async def aget_settings() -> AgentSettings:
    """The current settings from async code: a fresh cached copy costs no thread crossing."""
    if _loader is None:
        return AgentSettings()
    if _peek is not None:
        settings = _peek()
        if settings is not None:
            return settings

    return await db(_loader)

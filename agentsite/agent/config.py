"""The agent's settings as the runtime sees them, and the hook a facet uses to supply them.

The runtime imports no facet app: `accounts` registers a loader in its AppConfig.ready() that reads
the config singleton. Without one (runtime tests), the defaults below apply.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class AgentSettings:
    provider: str = "offline"  # openai | anthropic | offline
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
    # Seconds an upstream LLM may stay silent (connect, or between two bytes of a stream) before it fails.
    request_timeout: float = 120.0

    def with_overrides(self, **changes) -> AgentSettings:
        return replace(self, **changes)

    def tool_enabled(self, name: str) -> bool:
        return "*" in self.tools or name in self.tools


_loader: Callable[[], AgentSettings] | None = None


def set_settings_loader(loader: Callable[[], AgentSettings] | None) -> None:
    global _loader
    _loader = loader


def settings_loader() -> Callable[[], AgentSettings] | None:
    """The loader now registered (so a test can put it back after swapping in its own)."""
    return _loader


def get_settings() -> AgentSettings:
    """The current settings (sync: call it through sync_to_async from async code)."""
    return _loader() if _loader else AgentSettings()

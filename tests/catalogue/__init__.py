"""A model catalogue for tests of the code that chooses models (sessions, workflow `llm` nodes, scheduled tasks):
`use_catalogue(...)` makes the agent's settings those of a two-connection catalogue on the given upstreams, with
an alias, for the duration of a `with` block (the settings loader is put back afterwards)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from agentsite.agent.config import AgentSettings, set_settings_loader, settings_loader, settings_peek
from agentsite.agent.routing import Alias, AliasTarget, Catalogue, Connection, reset_router


def two_upstreams(hosted_url: str, local_url: str) -> Catalogue:
    """`hosted/big` and `local/small` (the default connection), alias `smart` = [hosted/big, local/small]."""
    return Catalogue([Connection("hosted", "openai", hosted_url, "sk-hosted", models=("big",), timeout_s=5.0),
                      Connection("local", "openai", local_url, models=("small",), timeout_s=5.0)],
                     [Alias("smart", "fallback", (AliasTarget("hosted/big"), AliasTarget("local/small")))],
                     default_connection="local")


@contextmanager
def use_catalogue(catalogue: Catalogue, model: str = "") -> Iterator[AgentSettings]:
    settings = AgentSettings(provider="openai", model=model, kb_enabled=False, tools=(), request_timeout=5.0,
                             catalogue=catalogue)
    loader, peek = settings_loader(), settings_peek()
    set_settings_loader(lambda: settings, lambda: settings)
    reset_router()
    try:
        yield settings
    finally:
        set_settings_loader(loader, peek)
        reset_router()



def closed_url() -> str:
    """An OpenAI-style base URL on loopback where connections are refused (a stopped upstream)."""
    from tests.server import refusing_port

    return f"http://127.0.0.1:{refusing_port()}/v1"

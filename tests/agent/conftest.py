"""Fixtures for the runtime's tests: settings pointing at the fake upstreams (whose fixtures come from the
tests.fakes.fixtures plugin that tests/conftest.py loads), and test tool and context sources.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agentsite.agent.config import AgentSettings
from agentsite.agent.context import (
    context_source_now,
    context_sources,
    register_context_source,
    unregister_context_source,
)
from agentsite.agent.tools import StaticToolSource, Tool, ToolContext, ToolResult, registry

API_KEY = "sk-test-0123456789-secret-key"


@pytest.fixture(autouse=True)
def runtime_registries_without_facets() -> Iterator[None]:
    """The runtime alone: the facets' context sources and tool sources (the knowledge base's, MCP's) are set
    aside for each test and put back after it, so these tests never touch their databases or servers.
    """
    contexts = context_sources()
    nows = {name: context_source_now(name) for name in contexts}  # put back with them: a chat turn's fast path
    tool_sources = [registry.source(name) for name in registry.sources() if name != "builtin"]
    for name in contexts:
        unregister_context_source(name)
    for source in tool_sources:
        registry.unregister_source(source.name)
    yield
    for name, source in contexts.items():
        register_context_source(name, source, now=nows[name])
    for source in tool_sources:
        registry.register_source(source)


@pytest.fixture
def openai_settings(fake_openai) -> AgentSettings:
    return AgentSettings(provider="openai", base_url=fake_openai.base_url, api_key=API_KEY, model="gpt-fake",
                         request_timeout=5.0)


@pytest.fixture
def anthropic_settings(fake_anthropic) -> AgentSettings:
    return AgentSettings(provider="anthropic", base_url=fake_anthropic.base_url, api_key=API_KEY,
                         model="claude-fake", request_timeout=5.0)


@pytest.fixture(params=["openai", "anthropic"])
def upstream(request, fake_openai, fake_anthropic) -> tuple[Any, AgentSettings]:
    """Each wire format in turn: (its fake, settings pointing at it)."""
    fake = fake_openai if request.param == "openai" else fake_anthropic
    return fake, AgentSettings(provider=request.param, base_url=fake.base_url, api_key=API_KEY,
                               model=f"{request.param}-fake", request_timeout=5.0)


def text_tool(name: str, function, schema: dict[str, Any] | None = None, timeout: float = 5.0) -> Tool:
    """A test tool whose function takes the arguments and returns text."""

    async def call(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult.of_text(await function(arguments, ctx))

    return Tool(name, f"The test tool {name}.", schema or {"type": "object", "properties": {}}, call, source="test",
                timeout=timeout)


@pytest.fixture
def tool_source() -> Iterator[list[Tool]]:
    """A list of tools registered as the source "test" for the test's duration; append tools to it."""
    tools: list[Tool] = []
    registry.register_source(StaticToolSource("test", lambda: tools))
    yield tools
    registry.unregister_source("test")


@pytest.fixture
def add_context_source() -> Iterator[Callable[[str, Any], None]]:
    """register_context_source for the test's duration."""
    names: list[str] = []

    def add(name: str, source: Any) -> None:
        names.append(name)
        register_context_source(name, source)

    yield add
    for name in names:
        unregister_context_source(name)

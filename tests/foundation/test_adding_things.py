"""docs/architecture.md "Adding things", checked by doing: every repository path it names exists, a built-in tool
added as its recipe says is offered and run by the runtime's tool registry, and a scrape-time metric registered
as its recipe says is in the Prometheus text of /metrics. The door recipe is done in
tests/compat/test_adding_a_door.py."""

from __future__ import annotations

import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentsite.agent import builtin
from agentsite.agent.config import AgentSettings
from agentsite.agent.tools import registry
from agentsite.agent.tooltypes import Tool, ToolContext, ToolResult
from agentsite.core import metrics
from tests.foundation.codeshape import ROOT

ARCHITECTURE = ROOT / "docs" / "architecture.md"
SECTION = "Adding things"
# A backticked token is a repository path when it names a folder and something in it, or is a top-level file
# (pyproject.toml, a doc). Bare names (`wire.py`, `migrations/`) are relative to the package a step names;
# `<placeholders>` stand for what the reader adds.
PATH = re.compile(r"^[\w.-]+/[\w./-]+$|^[\w.-]+\.(?:toml|md)$")


def section(text: str, title: str) -> str:
    """The body of the `## title` section of a Markdown text (up to the next `## `)."""
    _, found, rest = text.partition(f"\n## {title}\n")
    assert found, f"docs/architecture.md has no section {title!r}"
    return rest.split("\n## ", 1)[0]


def named_paths(text: str) -> list[str]:
    """The repository paths a text names in backticks, placeholders left out, in order, once each."""
    tokens = re.findall(r"`([^`\n]+)`", text)
    return list(dict.fromkeys(token for token in tokens if "<" not in token and PATH.match(token)))


def missing_paths(text: str) -> list[str]:
    return [path for path in named_paths(text) if not (ROOT / path).exists()]


def test_every_path_the_recipes_name_exists():
    text = section(ARCHITECTURE.read_text(), SECTION)
    named = named_paths(text)
    assert "compat/doors.py" in named and "pyproject.toml" in named and "tests/dashboard/" in named, named
    assert missing_paths(text) == []


def test_the_path_check_finds_a_planted_missing_path():
    text = section(ARCHITECTURE.read_text(), SECTION)
    planted = text + "\n3. `agentsite/agent/builtin/nowhere.py` and `compat/<dialect>/wire.py`.\n"
    assert missing_paths(planted) == ["agentsite/agent/builtin/nowhere.py"]


# --- a built-in tool ------------------------------------------------------------------------------------------

async def _shout(arguments: dict, ctx: ToolContext) -> ToolResult:
    return ToolResult.of_text(f"{arguments['text'].upper()} (for user {ctx.user_id})")


SHOUT = Tool("shout", "Says the text louder.", {
    "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
    "additionalProperties": False}, _shout)


@pytest.fixture
def shout_added(monkeypatch):
    """Step 2 of the recipe, "one entry in builtin_tools()": the built-in source lists builtin_tools() at every
    listing, so the entry is given to it as the edited function would give it."""
    source = registry.source("builtin")
    assert source is not None and source._tools is builtin.builtin_tools  # the registry reads this function
    monkeypatch.setattr(source, "_tools", lambda: [*builtin.builtin_tools(), SHOUT])
    return SHOUT


async def test_a_builtin_tool_added_to_builtin_tools_is_offered_to_a_user_and_runs(shout_added):
    user = ToolContext(user_id=7, is_admin=False)
    every_tool = AgentSettings()  # every tool enabled
    offered = await registry.list_tools(user, every_tool)
    assert "shout" in [tool.name for tool in offered]
    assert registry.list_tools_now(user, every_tool) is not None
    assert "shout" in [tool.name for tool in registry.list_tools_now(user, every_tool) or []]
    result = await registry.call("shout", {"text": "hello"}, user)
    assert not result.is_error and result.text == "HELLO (for user 7)"
    refused = await registry.call("shout", {"text": 3}, user)  # the registry validates against its schema
    assert refused.is_error and "Invalid arguments for shout" in refused.text


async def test_without_the_entry_the_tool_is_not_there():
    user = ToolContext(user_id=7, is_admin=False)
    assert "shout" not in [tool.name for tool in await registry.list_tools(user, AgentSettings())]
    assert (await registry.call("shout", {"text": "hello"}, user)).is_error


# --- a metric -------------------------------------------------------------------------------------------------

@pytest.fixture
def metrics_on(monkeypatch, settings):
    monkeypatch.setattr(metrics, "ENABLED", True)
    monkeypatch.delenv(metrics.MULTIPROC_ENV, raising=False)
    monkeypatch.setattr(metrics, "_scrape_hooks", dict(metrics._scrape_hooks))  # the test's hook goes with it
    settings.AGENTSITE_METRICS_TOKEN = ""


def _gauges(client) -> dict[str, float]:
    response = client.get("/metrics")
    assert response.status_code == 200, response.content
    return {sample.name: sample.value for family in text_string_to_metric_families(response.content.decode())
            for sample in family.samples}


@pytest.mark.django_db
def test_a_scrape_time_metric_registered_with_on_scrape_is_in_metrics(anon_client, metrics_on):
    assert "agentsite_widgets_waiting" not in _gauges(anon_client)
    waiting = [3.0]
    metrics.on_scrape("widgets", lambda: [("agentsite_widgets_waiting", "Widgets waiting.", waiting[0])])
    assert _gauges(anon_client)["agentsite_widgets_waiting"] == 3.0
    waiting[0] = 5.0  # read at each scrape
    assert _gauges(anon_client)["agentsite_widgets_waiting"] == 5.0

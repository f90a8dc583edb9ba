"""web_search: the configured backends in turn (SearXNG when AGENTSITE_SEARXNG_URL is set, then DuckDuckGo)."""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from django.conf import settings

from agentsite.agent.builtin.search.base import SearchBackend, SearchUnavailable
from agentsite.agent.builtin.search.duckduckgo import DEFAULT_URL as DUCKDUCKGO_URL
from agentsite.agent.builtin.search.duckduckgo import DuckDuckGoBackend
from agentsite.agent.builtin.search.searxng import SearxngBackend
from agentsite.agent.tooltypes import Tool, ToolContext, ToolError, ToolResult

logger = logging.getLogger(__name__)


def duckduckgo_url() -> str:
    """`settings.AGENTSITE_DUCKDUCKGO_URL`, else the env var of that name, else DuckDuckGo; empty turns it off."""
    configured = getattr(settings, "AGENTSITE_DUCKDUCKGO_URL", None)
    if configured is None:
        configured = os.environ.get("AGENTSITE_DUCKDUCKGO_URL", DUCKDUCKGO_URL)
    return configured.strip()


def configured_backends() -> list[SearchBackend]:
    """Read on every call, so a changed setting (or a test's override) applies at once."""
    backends: list[SearchBackend] = []
    searxng = (getattr(settings, "AGENTSITE_SEARXNG_URL", "") or "").strip()
    if searxng:
        backends.append(SearxngBackend(searxng))
    if duckduckgo_url():
        backends.append(DuckDuckGoBackend(duckduckgo_url()))
    return backends


async def search(query: str, *, max_results: int = 5) -> list[dict[str, str]]:
    """Results [{title, url, snippet}] from the first backend that answers; raises ToolError when none does."""
    backends = configured_backends()
    if not backends:
        raise ToolError("No search backend is configured: set AGENTSITE_SEARXNG_URL, or leave DuckDuckGo on.")
    failures = []
    for backend in backends:
        try:
            return [result.as_dict() for result in await backend.search(query, max_results=max_results)]
        except SearchUnavailable as exc:
            logger.warning("Search backend %s at %s failed: %s", backend.name, backend.base_url, exc)
            failures.append(f"{backend.name} at {backend.base_url}: {exc}")
    raise ToolError("No search backend is reachable (" + "; ".join(failures) + ").")


async def web_search(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
    results = await search(arguments["query"], max_results=arguments.get("max_results", 5))
    if not results:
        return ToolResult.of_text(f"No results for {arguments['query']!r}.")
    return ToolResult.of_text(json.dumps(results, ensure_ascii=False, indent=1))


WEB_SEARCH_TOOL = Tool(
    name="web_search",
    description="Search the web. Returns a JSON list of results, each {title, url, snippet}, best first.",
    input_schema={
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "description": "What to search for."},
            "max_results": {"type": "integer", "minimum": 1, "maximum": 20, "default": 5},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    call=web_search,
    timeout=30.0,
)

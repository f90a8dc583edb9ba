"""web_search against a loopback fake speaking SearXNG's JSON API and DuckDuckGo's HTML page."""

from __future__ import annotations

import json

import pytest

from agentsite.agent.builtin.search.duckduckgo import DuckDuckGoBackend
from agentsite.agent.builtin.search.searxng import SearxngBackend
from agentsite.agent.builtin.web_search import configured_backends
from agentsite.agent.tools import ToolContext, registry
from tests.server import refusing_port

CTX = ToolContext(user_id=1, is_admin=False)  # resolved: no database lookup
RESULTS = [
    {"title": "Tides - Wikipedia", "url": "https://en.wikipedia.org/wiki/Tide", "snippet": "Rise & fall."},
    {"title": "Tide tables", "url": "https://tides.example/tables?port=brest&year=2026", "snippet": "Times for ports."},
    {"title": "Moon facts", "url": "https://moon.example/", "snippet": "The Moon pulls."},
]


@pytest.fixture
def searxng_only(settings, fake_search):
    settings.AGENTSITE_SEARXNG_URL = fake_search.searxng_url
    settings.AGENTSITE_DUCKDUCKGO_URL = ""


@pytest.fixture
def duckduckgo_only(settings, fake_search):
    settings.AGENTSITE_SEARXNG_URL = ""
    settings.AGENTSITE_DUCKDUCKGO_URL = fake_search.duckduckgo_url


async def web_search(query: str, **arguments):
    return await registry.call("web_search", {"query": query, **arguments}, CTX)


async def test_web_search_returns_searxng_results_as_title_url_snippet(fake_search, searxng_only):
    fake_search.results = RESULTS

    result = await web_search("tides", max_results=2)

    assert not result.is_error, result.text
    assert json.loads(result.text) == RESULTS[:2]
    assert fake_search.requests[0].path == "/search"
    assert fake_search.requests[0].query == {"q": ["tides"], "format": ["json"]}


async def test_web_search_reads_duckduckgos_html_results_without_ads_or_redirect_links(fake_search, duckduckgo_only):
    fake_search.results = RESULTS

    result = await web_search("tides")

    assert json.loads(result.text) == RESULTS
    assert fake_search.requests[0].path == "/html/"
    assert fake_search.requests[0].query["q"] == ["tides"]
    assert "Mozilla/5.0" in fake_search.requests[0].headers["user-agent"]


async def test_web_search_falls_back_to_duckduckgo_when_searxng_is_unreachable(settings, fake_search):
    settings.AGENTSITE_SEARXNG_URL = f"http://127.0.0.1:{refusing_port()}"
    settings.AGENTSITE_DUCKDUCKGO_URL = fake_search.duckduckgo_url
    fake_search.results = RESULTS[:1]

    result = await web_search("tides")

    assert json.loads(result.text) == RESULTS[:1]


async def test_web_search_says_clearly_when_no_backend_is_reachable(settings, fake_search):
    settings.AGENTSITE_SEARXNG_URL = f"http://127.0.0.1:{refusing_port()}"
    settings.AGENTSITE_DUCKDUCKGO_URL = fake_search.duckduckgo_url
    fake_search.status = 503

    result = await web_search("tides")

    assert result.is_error
    assert result.text.startswith("No search backend is reachable")
    assert "searxng at http://127.0.0.1:" in result.text and "ConnectError" in result.text
    assert f"duckduckgo at {fake_search.duckduckgo_url}: it answered HTTP 503" in result.text


async def test_web_search_says_clearly_when_no_backend_is_configured(settings):
    settings.AGENTSITE_SEARXNG_URL = ""
    settings.AGENTSITE_DUCKDUCKGO_URL = ""

    result = await web_search("tides")

    assert result.is_error
    assert "No search backend is configured" in result.text


async def test_a_searxng_without_the_json_format_is_explained(fake_search, searxng_only):
    fake_search.json_enabled = False

    result = await web_search("tides")

    assert result.is_error
    assert "it answered HTTP 403 (is the json format enabled in its settings.yml?)" in result.text


async def test_web_search_with_nothing_found_says_so(fake_search, searxng_only):
    result = await web_search("zzzz")

    assert not result.is_error
    assert result.text == "No results for 'zzzz'."


async def test_the_backends_follow_the_settings(settings):
    settings.AGENTSITE_SEARXNG_URL = "http://searx.local:8888"
    settings.AGENTSITE_DUCKDUCKGO_URL = "http://ddg.local/html/"

    backends = configured_backends()

    assert [(type(b), b.base_url) for b in backends] == [(SearxngBackend, "http://searx.local:8888"),
                                                         (DuckDuckGoBackend, "http://ddg.local/html/")]


async def test_web_search_validates_its_arguments(fake_search, searxng_only):
    result = await registry.call("web_search", {"query": ""}, CTX)

    assert result.is_error
    assert "Invalid arguments" in result.text
    assert fake_search.requests == []

"""DuckDuckGo's keyless HTML endpoint (html.duckduckgo.com/html/), parsed with BeautifulSoup."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import httpx

from agentsite.agent.builtin.search.base import SearchBackend, SearchResult

DEFAULT_URL = "https://html.duckduckgo.com/html/"
# The HTML endpoint answers bots without a browser-like agent with an error page.
USER_AGENT = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"


class DuckDuckGoBackend(SearchBackend):
    name = "duckduckgo"

    async def search(self, query: str, *, max_results: int) -> list[SearchResult]:
        async with httpx.AsyncClient(trust_env=False, headers={"User-Agent": USER_AGENT}) as client:
            response = await self._get(client, self.base_url, params={"q": query})
        return parse_results(response.text)[:max_results]


def parse_results(page: str) -> list[SearchResult]:
    # Start-up cost: BeautifulSoup is imported on the first search, not by every process.
    from bs4 import BeautifulSoup

    results = []
    for block in BeautifulSoup(page, "html.parser").select("div.result"):
        if "result--ad" in (block.get("class") or []):
            continue
        link = block.select_one("a.result__a")
        if link is None or not link.get("href"):
            continue
        snippet = block.select_one(".result__snippet")
        results.append(SearchResult(link.get_text(" ", strip=True), _target(str(link["href"])),
                                    snippet.get_text(" ", strip=True) if snippet else ""))
    return results


def _target(href: str) -> str:
    """Result links go through DuckDuckGo's redirector (//duckduckgo.com/l/?uddg=<url>); this is the <url>."""
    parsed = urlparse(href)
    if parsed.path.startswith("/l/"):
        target = parse_qs(parsed.query).get("uddg")
        if target:
            return target[0]
    return f"https:{href}" if href.startswith("//") else href

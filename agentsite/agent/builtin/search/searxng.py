"""A SearXNG instance's JSON API (`/search?format=json`; the instance must enable the json format)."""

from __future__ import annotations

import httpx

from agentsite.agent.builtin.search.base import SearchBackend, SearchResult, SearchUnavailable


class SearxngBackend(SearchBackend):
    name = "searxng"

    async def search(self, query: str, *, max_results: int) -> list[SearchResult]:
        url = f"{self.base_url.rstrip('/')}/search"
        async with httpx.AsyncClient(trust_env=False) as client:
            try:
                response = await self._get(client, url, params={"q": query, "format": "json"})
            except SearchUnavailable as exc:
                if "HTTP 403" in str(exc):
                    raise SearchUnavailable(f"{exc} (is the json format enabled in its settings.yml?)") from None
                raise
        try:
            results = response.json().get("results", [])
        except (ValueError, AttributeError):
            raise SearchUnavailable("its reply was not the JSON search API's") from None
        return [SearchResult(str(item.get("title") or ""), str(item["url"]), str(item.get("content") or ""))
                for item in results if isinstance(item, dict) and item.get("url")][:max_results]

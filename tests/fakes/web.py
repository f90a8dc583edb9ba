"""Fake web servers: pages and redirects for web_fetch, and a search engine speaking SearXNG's JSON API and
DuckDuckGo's HTML endpoint for web_search.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from tests.fakes.http import FakeResponse, FakeServer, RecordedRequest

Route = FakeResponse | Callable[[RecordedRequest], FakeResponse]


class FakeWebServer(FakeServer):
    """Answers each path with the FakeResponse routed to it (404 otherwise)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        super().__init__(host, port)
        self.routes: dict[str, Route] = {}

    def route(self, path: str, response: Route) -> FakeWebServer:
        self.routes[path] = response
        return self

    def page(self, path: str, body: str, content_type: str = "text/html; charset=utf-8") -> FakeWebServer:
        return self.route(path, FakeResponse.text(body, content_type=content_type))

    def redirect(self, path: str, location: str, status: int = 302) -> FakeWebServer:
        return self.route(path, FakeResponse(status, headers={"Location": location}, content_type="text/plain"))

    def url(self, path: str) -> str:
        return self.base_url + path

    def reset(self) -> None:
        super().reset()
        self.routes.clear()

    def handle(self, request: RecordedRequest) -> FakeResponse:
        route = self.routes.get(request.path)
        if route is None:
            return FakeResponse.text("Not found", 404)
        return route(request) if callable(route) else route


class FakeSearchServer(FakeServer):
    """GET /search?q=&format=json (SearXNG) and GET or POST /html/?q= (DuckDuckGo's HTML results page).

    `results` are [{title, url, snippet}]; `status` makes every search answer that status instead;
    `json_enabled = False` answers the JSON API with 403, as SearXNG does by default.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        super().__init__(host, port)
        self.results: list[dict[str, str]] = []
        self.status = 200
        self.json_enabled = True

    def reset(self) -> None:
        super().reset()
        self.results = []
        self.status = 200
        self.json_enabled = True

    @property
    def searxng_url(self) -> str:
        return self.base_url

    @property
    def duckduckgo_url(self) -> str:
        return self.base_url + "/html/"

    def handle(self, request: RecordedRequest) -> FakeResponse:
        if self.status != 200:
            return FakeResponse.text("refused", self.status)
        if request.path == "/search":
            if request.query.get("format") != ["json"] or not self.json_enabled:
                return FakeResponse.text("format not allowed", 403)
            return FakeResponse.json({"query": request.query.get("q", [""])[0], "number_of_results": len(self.results),
                                      "results": [self._searxng(result) for result in self.results]})
        if request.path == "/html/":
            return FakeResponse.text(self._duckduckgo_page(), content_type="text/html; charset=utf-8")
        return FakeResponse.text("Not found", 404)

    def _searxng(self, result: dict[str, str]) -> dict[str, Any]:
        return {"title": result["title"], "url": result["url"], "content": result["snippet"], "engine": "fake",
                "score": 1.0, "category": "general"}

    def _duckduckgo_page(self) -> str:
        ad = ('<div class="result results_links result--ad"><h2 class="result__title"><a class="result__a" '
              'href="https://ads.example/">An advert</a></h2><a class="result__snippet">Buy now</a></div>')
        blocks = [ad] + [
            '<div class="result results_links results_links_deep web-result"><div class="links_main result__body">'
            f'<h2 class="result__title"><a rel="nofollow" class="result__a" href="//duckduckgo.com/l/?uddg='
            f'{quote(result["url"], safe="")}&amp;rut=abc">{html.escape(result["title"])}</a></h2>'
            f'<a class="result__snippet" href="#">{html.escape(result["snippet"])}</a></div></div>'
            for result in self.results]
        return f'<html><body><div id="links" class="results">{"".join(blocks)}</div></body></html>'

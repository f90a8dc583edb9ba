"""The small base class every web search backend implements."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class SearchResult:
    title: str
    url: str
    snippet: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


class SearchUnavailable(Exception):
    """The backend could not answer (unreachable, refused, an unexpected reply); the message says why."""


class SearchBackend:
    """Searches the web. `search()` returns at most max_results results, best first (an empty list when
    nothing matched) and raises SearchUnavailable when the backend cannot answer.
    """

    name: str = ""
    timeout: float = 10.0

    def __init__(self, base_url: str):
        self.base_url = base_url

    async def search(self, query: str, *, max_results: int) -> list[SearchResult]:
        raise NotImplementedError

    async def _get(self, client: httpx.AsyncClient, url: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await client.get(url, timeout=self.timeout, **kwargs)
        except httpx.HTTPError as exc:
            raise SearchUnavailable(f"{type(exc).__name__}: {exc or 'no answer'}") from None
        if response.status_code != 200:
            raise SearchUnavailable(f"it answered HTTP {response.status_code}")
        return response

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_url!r})"

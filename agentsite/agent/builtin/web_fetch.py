"""web_fetch: read a web page as Markdown or text, with private addresses off limits.

http(s) only; at most MAX_REDIRECTS redirects, each hop checked again; at most MAX_BYTES read; one overall
timeout; every connection goes to the address that was checked (see netguard). HTML becomes readable
text with trafilatura (BeautifulSoup's text when trafilatura finds no main content).
"""

from __future__ import annotations

import asyncio
import html
import logging
import re
from dataclasses import dataclass
from typing import Any

import httpx
from django.conf import settings

from agentsite.agent.builtin.netguard import AddressPolicy
from agentsite.agent.tooltypes import Tool, ToolContext, ToolError, ToolResult

logger = logging.getLogger(__name__)

MAX_BYTES = 2 * 1024 * 1024
MAX_REDIRECTS = 5
TIMEOUT = 20.0
DEFAULT_MAX_CHARS = 20_000
USER_AGENT = "Mozilla/5.0 (compatible; agentsite/1.0; +https://github.com/agentsite)"
_REDIRECTS = {301, 302, 303, 307, 308}
_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/xhtml+xml", "application/rss+xml",
               "application/atom+xml", "application/ld+json", "application/javascript")
_TITLE = re.compile(rb"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)


def private_fetch_allowed() -> bool:
    """Read on every call, so a changed setting (or a test's override) applies at once."""
    return bool(getattr(settings, "AGENTSITE_ALLOW_PRIVATE_FETCH", False))


def default_policy() -> AddressPolicy:
    return AddressPolicy(allow_private=private_fetch_allowed())


@dataclass
class FetchedPage:
    url: str  # after redirects
    status: int
    content_type: str
    charset: str | None
    body: bytes
    truncated: bool  # the body went past max_bytes and was cut there


async def fetch(url: str, *, policy: AddressPolicy | None = None, timeout: float = TIMEOUT,
                max_bytes: int = MAX_BYTES, max_redirects: int = MAX_REDIRECTS) -> FetchedPage:
    """GET a URL under the address policy; raises ToolError with a sentence for every refusal and failure."""
    policy = policy or default_policy()
    try:
        async with asyncio.timeout(timeout):
            async with httpx.AsyncClient(trust_env=False, follow_redirects=False, timeout=timeout) as client:
                return await _follow(client, url, policy, max_bytes, max_redirects)
    except TimeoutError:
        raise ToolError(f"Fetching {url} took longer than {timeout:g} seconds.") from None
    except httpx.HTTPError as exc:
        raise ToolError(f"Fetching {url} failed: {exc or type(exc).__name__}.") from None


async def _follow(client: httpx.AsyncClient, url: str, policy: AddressPolicy, max_bytes: int,
                  max_redirects: int) -> FetchedPage:
    target = _checked_url(url)
    for _hop in range(max_redirects + 1):
        response = await _send_pinned(client, target, policy)
        location = response.headers.get("location")
        if response.status_code not in _REDIRECTS or not location:
            return await _read(response, str(target), max_bytes)
        await response.aclose()
        target = _checked_url(str(target.join(location)))
    raise ToolError(f"Fetching {url} was redirected more than {max_redirects} times.")


def _checked_url(url: str) -> httpx.URL:
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ToolError(f"{url!r} is not a valid URL: {exc}.") from None
    if parsed.scheme not in ("http", "https"):
        raise ToolError(f"Only http and https URLs can be fetched, not {parsed.scheme or 'this'}: {url}")
    if not parsed.raw_host:
        raise ToolError(f"The URL {url} has no host.")
    return parsed


async def _send_pinned(client: httpx.AsyncClient, target: httpx.URL, policy: AddressPolicy) -> httpx.Response:
    host = target.raw_host.decode("ascii")
    port = target.port or (443 if target.scheme == "https" else 80)
    address = await policy.pin(host, port)
    # The request goes to the checked address; the name stays in the Host header and in TLS (SNI and the
    # certificate check), so virtual hosts and HTTPS work as if the name had been used.
    extensions = {"sni_hostname": host} if target.scheme == "https" else {}
    headers = {"Host": target.netloc.decode("ascii"), "User-Agent": USER_AGENT, "Accept-Encoding": "identity",
               "Accept": "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.8,*/*;q=0.5"}
    request = client.build_request("GET", target.copy_with(host=address), headers=headers, extensions=extensions)
    return await client.send(request, stream=True)


async def _read(response: httpx.Response, url: str, max_bytes: int) -> FetchedPage:
    body = bytearray()
    truncated = False
    try:
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > max_bytes:  # one chunk (tens of kB) past the cap is all that is ever held
                del body[max_bytes:]
                truncated = True
                break
    finally:
        await response.aclose()
    content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
    return FetchedPage(url, response.status_code, content_type, response.charset_encoding, bytes(body), truncated)


def page_text(page: FetchedPage, *, output_format: str = "markdown") -> tuple[str, str]:
    """The page's title and readable text; raises ToolError for content that is not text."""
    kind = page.content_type
    if kind in ("text/html", "application/xhtml+xml") or (not kind and page.body.lstrip()[:1] == b"<"):
        return _html_title(page.body), _html_text(page.body, page.url, output_format)
    if not kind or kind.startswith(_TEXT_TYPES):
        return "", page.body.decode(page.charset or "utf-8", "replace")
    raise ToolError(f"{page.url} is {kind}, not a web page or text; web_fetch reads only text.")


def _html_title(body: bytes) -> str:
    match = _TITLE.search(body[:200_000])
    return html.unescape(match[1].decode("utf-8", "replace")).strip() if match else ""


def _html_text(body: bytes, url: str, output_format: str) -> str:
    # Start-up cost: trafilatura (and lxml) are imported on the first fetch, not by every process.
    import trafilatura

    markdown = output_format == "markdown"
    text = trafilatura.extract(body, url=url, output_format="markdown" if markdown else "txt", include_links=markdown,
                               include_tables=True, include_comments=False, favor_recall=True)
    if text:
        return text
    # Start-up cost: BeautifulSoup is imported on the first fetch, not by every process.
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(body, "html.parser")
    for element in soup(["script", "style", "noscript", "template"]):
        element.decompose()
    return "\n".join(line.strip() for line in soup.get_text("\n").splitlines() if line.strip())


async def web_fetch(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
    page = await fetch(arguments["url"])
    if page.status >= 400:
        raise ToolError(f"{page.url} answered HTTP {page.status}.")
    title, text = await asyncio.to_thread(page_text, page, output_format=arguments.get("format", "markdown"))
    max_chars = arguments.get("max_chars", DEFAULT_MAX_CHARS)
    notes = []
    if page.truncated:
        notes.append(f"[The page is larger than {MAX_BYTES // (1024 * 1024)} MB; only its start was read.]")
    if len(text) > max_chars:
        text = text[:max_chars]
        notes.append(f"[The text was cut at {max_chars} characters.]")
    header = f"URL: {page.url}\n" + (f"Title: {title}\n" if title else "")
    return ToolResult.of_text(header + "\n" + text.strip() + ("\n\n" + "\n".join(notes) if notes else ""))


WEB_FETCH_TOOL = Tool(
    name="web_fetch",
    description="Fetch a web page (http or https) and return its main content as Markdown or plain text.",
    input_schema={
        "type": "object",
        "properties": {
            "url": {"type": "string", "description": "The http(s) URL to fetch."},
            "format": {"type": "string", "enum": ["markdown", "text"], "default": "markdown"},
            "max_chars": {"type": "integer", "minimum": 100, "maximum": 100_000, "default": DEFAULT_MAX_CHARS,
                          "description": "Cut the returned text at this many characters."},
        },
        "required": ["url"],
        "additionalProperties": False,
    },
    call=web_fetch,
    timeout=TIMEOUT + 5,
)

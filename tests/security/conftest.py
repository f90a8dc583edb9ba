"""Fixtures for the security tests: every HTTP route the server answers, found from its own configuration
(the URL conf and the ASGI mounts), so that a route added later is tested without anyone listing it."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

# Every method a client can send that a view could answer; HEAD and OPTIONS included, since Django answers
# HEAD with the GET handler and DRF answers OPTIONS itself.
HTTP_METHODS = ("get", "post", "put", "patch", "delete", "head", "options")
API_PREFIXES = ("/api/", "/v1/")


@dataclass(frozen=True)
class Route:
    """One URL pattern: its template with `{name}` for each path parameter, and the view that serves it."""

    template: str
    callback: object
    parameters: tuple[str, ...]

    @property
    def view_class(self) -> type | None:
        # Class-based views (DRF's included) carry `view_class`; function views may carry a `cls` that only
        # documents them for the schema, which says nothing about what they answer: not used here.
        return getattr(self.callback, "view_class", None)

    def path(self, **values: str) -> str:
        return self.template.format(**values)


_REGEX_GROUP = re.compile(r"\(\?P<(\w+)>[^)]*\)")
_ROUTE_PARAMETER = re.compile(r"<(?:\w+:)?(\w+)>")


def _pattern_text(pattern) -> str:
    """A pattern as a template piece: `<uuid:pk>` and `(?P<pk>...)` both become `{pk}`."""
    text = str(pattern)
    if text.startswith("^") or text.endswith("$") or "(?P<" in text:  # a re_path
        text = _REGEX_GROUP.sub(lambda match: "{" + match.group(1) + "}", text.lstrip("^").rstrip("$"))
        text = text.replace("\\", "")
    return _ROUTE_PARAMETER.sub(lambda match: "{" + match.group(1) + "}", text)


def _walk(patterns, prefix: str = ""):
    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from _walk(entry.url_patterns, prefix + _pattern_text(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield prefix + _pattern_text(entry.pattern), entry.callback


def url_routes(prefixes: tuple[str, ...] = API_PREFIXES) -> list[Route]:
    """Every route of the URL conf whose path starts with one of prefixes, in URL-conf order."""
    found = []
    for template, callback in _walk(get_resolver().url_patterns):
        template = "/" + template
        if template.startswith(prefixes) or template + "/" in prefixes:
            found.append(Route(template, callback, tuple(re.findall(r"{(\w+)}", template))))
    return found


def asgi_mounts() -> list[str]:
    """The path prefixes of the ASGI apps mounted next to Django (agentsite.routing.MOUNTS)."""
    from agentsite.routing import MOUNTS

    return [prefix for prefix, _factory in MOUNTS]


@pytest.fixture(scope="session")
def api_routes() -> list[Route]:
    """Every /api and /v1 route of the URL conf."""
    return url_routes()

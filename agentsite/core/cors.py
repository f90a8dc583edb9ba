"""The project's CORS policy as one function, for the ASGI apps django-cors-headers' middleware does not
wrap (/mcp). It reads the same settings as that middleware applies to /api and /v1, with its rules; the
agreement is tested (tests/foundation/test_dependency_hooks.py), so neither can drift alone.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from django.conf import settings


def origin_allowed(origin: str) -> bool:
    """Whether a browser page at `origin` (the Origin header's value) may call the API."""
    if getattr(settings, "CORS_ALLOW_ALL_ORIGINS", False):
        return True
    listed = list(getattr(settings, "CORS_ALLOWED_ORIGINS", ()))
    if origin == "null":  # sandboxed iframes and file:// pages: only when listed literally
        return "null" in listed
    url = urlsplit(origin)
    if any((entry.scheme, entry.netloc) == (url.scheme, url.netloc) for entry in map(urlsplit, listed)):
        return True
    return any(re.match(pattern, origin) for pattern in getattr(settings, "CORS_ALLOWED_ORIGIN_REGEXES", ()))

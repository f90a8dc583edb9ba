"""GET /: the built-in web dashboard, a static single-page app on the public API (static/agentsite/dashboard/);
GET /favicon.ico: the site's icon, for the pages that name none (the admin, the API docs, JSON answers)."""

from __future__ import annotations

from pathlib import Path

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

# The page runs only our own modules: no inline script or style, no other origin, no framing. Replies
# rendered from Markdown may hold images (data: and blob: for attachments; our own /api/uploads URLs);
# recorded and synthesised audio plays from blob: URLs.
CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' blob: data:",
    "media-src 'self' blob: data:",
    "connect-src 'self'",
    "font-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
])


@require_safe
def dashboard(request: HttpRequest) -> HttpResponse:
    response = render(request, "agentsite/dashboard.html")
    response["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    # The page is a shell whose module URLs do not change between releases: always revalidate it.
    response["Cache-Control"] = "no-cache"
    return response


FAVICON_PNG = Path(__file__).parent / "static" / "agentsite" / "favicon.png"


@require_safe
def favicon(request: HttpRequest) -> HttpResponse:
    """The icon browsers ask /favicon.ico for when a page links none (a PNG: every browser reads it there)."""
    response = HttpResponse(FAVICON_PNG.read_bytes(), content_type="image/png")
    response["Cache-Control"] = "public, max-age=86400"
    return response

"""GET /api/docs: Swagger UI (drf-spectacular's sidecar files, served by us) under a Content-Security-Policy
that allows only this server's own files.

drf-spectacular's page carries an inline <style> and, unless split, an inline <script>; here the script comes
from `?script` (its split view) and the style from a static file (the template:
agentsite/dashboard/templates/agentsite/api_docs.html), so the policy needs no 'unsafe-inline' and no
'unsafe-eval'. Swagger UI draws its icons from data: URIs in its stylesheet, and "Try it out" calls this same
origin.
"""

from __future__ import annotations

from drf_spectacular.views import SpectacularSwaggerSplitView

CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "font-src 'self'",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
])


class ApiDocsView(SpectacularSwaggerSplitView):
    """The page and its `?script`, both with the policy (a script answer ignores it; it costs nothing)."""

    template_name = "agentsite/api_docs.html"

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        response["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        return response

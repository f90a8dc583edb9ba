"""Django middleware: security headers on every response, and the /api error envelope everywhere."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest, HttpResponse
from django.utils.module_loading import import_string

from accounts.ratelimit import client_ip, login_attempt_check
from agentsite.core import logs, metrics, tracing
from agentsite.core.errors import AppError, app_error_response, code_for_status, error_response
from agentsite.server.asgi_limits import SECURITY_HEADERS

logger = logging.getLogger(__name__)

_REASONS = {
    404: "Not found.",
    405: "This method is not allowed here.",
    413: "The request body is larger than 10 MB.",
    500: "The server failed; the error was logged.",
}


def is_api_path(path: str) -> bool:
    return path == "/api" or path.startswith("/api/")


class _DualMiddleware:
    """Works for both sync and async views, so streaming async views stay async."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable):
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest):
        if self.is_async:
            return self._acall(request)
        return self.process(request, self.get_response(request))

    async def _acall(self, request: HttpRequest):
        return self.process(request, await self.get_response(request))

    def process(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        raise NotImplementedError


class RequestObservedMiddleware:
    """The outermost middleware: the request id (agentsite.core.logs) and the HTTP metrics.

    Cheap by design: a header read, a context variable, and while metrics are on two label lookups. The route
    label is the URL pattern Django matched (`/api/sessions/<uuid:session_id>`), never the path; a path
    nothing matched is `<unmatched>`. The duration is to the response object (a stream's headers)."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable):
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest):
        if self.is_async:
            return self._acall(request)
        started, token = self._start(request)
        try:
            if tracing.ENABLED:
                with tracing.span(request.method or "HTTP", kind="server") as span:
                    response = self._traced(span, request, self.get_response(request))
            else:
                response = self.get_response(request)
        finally:
            logs.REQUEST_ID.reset(token)
        return self._finish(request, response, started)

    async def _acall(self, request: HttpRequest):
        started, token = self._start(request)
        try:
            if tracing.ENABLED:
                response = await self._traced_acall(request)
            else:
                response = await self.get_response(request)
        finally:
            logs.REQUEST_ID.reset(token)
        return self._finish(request, response, started)

    async def _traced_acall(self, request: HttpRequest) -> HttpResponse:
        """The request under its span. A streamed response (an async stream: chat, SSE) keeps the span open, and
        current during each step of the stream, until the stream ends: the agent turn it runs is its child."""
        span = tracing.start(request.method or "HTTP", "server")
        try:
            with tracing.current(span):
                response = self._traced(span, request, await self.get_response(request))
        except BaseException as exc:
            tracing.end(span, exc)
            raise
        if getattr(response, "streaming", False) and getattr(response, "is_async", False):
            response.streaming_content = tracing.stream_in(span, response.streaming_content)  # type: ignore[attr-defined]
        else:
            tracing.end(span)
        return response

    @staticmethod
    def _traced(span, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        """The HTTP span's attributes (semantic conventions), named by the route template once it is known."""
        match = getattr(request, "resolver_match", None)
        route = "/" + match.route if match is not None and match.route else None
        if route:
            span.update_name(f"{request.method} {route}")
            span.set_attribute("http.route", route)
        span.set_attribute("http.request.method", request.method or "")
        span.set_attribute("url.path", request.path)
        span.set_attribute("http.response.status_code", response.status_code)
        span.set_attribute("agentsite.request_id", request.request_id)  # type: ignore[attr-defined]
        return response

    @staticmethod
    def _start(request: HttpRequest):
        request_id = logs.request_id_for(request.headers.get(logs.HEADER))
        request.request_id = request_id  # type: ignore[attr-defined]
        return time.perf_counter(), logs.REQUEST_ID.set(request_id)

    @staticmethod
    def _finish(request: HttpRequest, response: HttpResponse, started: float) -> HttpResponse:
        response[logs.HEADER] = request.request_id  # type: ignore[attr-defined]
        if metrics.ENABLED:
            match = getattr(request, "resolver_match", None)
            route = "/" + match.route if match is not None and match.route else "<unmatched>"
            metrics.http_request(route, request.method or "", response.status_code, time.perf_counter() - started)
        return response


class SecurityHeadersMiddleware(_DualMiddleware):
    def __call__(self, request: HttpRequest):
        # The default of request.api_key (the API key a request was authenticated with: accounts.authentication),
        # for the paths no authentication runs on; the doors that authenticate set it.
        request.api_key = None  # type: ignore[attr-defined]
        return super().__call__(request)

    def process(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        for name, value in SECURITY_HEADERS.items():
            response[name] = value
        return response


class AdminLoginRateLimitMiddleware(_DualMiddleware):
    """The admin login form shares the API login's per-IP attempt budget (another way to guess passwords)."""

    def __call__(self, request: HttpRequest):
        if request.method == "POST" and request.path.rstrip("/").endswith("/admin/login"):
            try:
                login_attempt_check(ip=client_ip(request))
            except AppError as exc:
                response = HttpResponse(f"{exc.message}\n", status=429, content_type="text/plain; charset=utf-8")
                response["Retry-After"] = exc.headers.get("Retry-After", "60")
                if self.is_async:
                    async def refused():
                        return response
                    return refused()
                return response
        return super().__call__(request)

    def process(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        return response


class ApiErrorEnvelopeMiddleware(_DualMiddleware):
    """Turns any non-JSON error under /api (Django's 404/405, an uncaught exception) into the envelope."""

    def process(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        if not is_api_path(request.path) or response.status_code < 400 or response.streaming \
                or getattr(response, "is_page", False):  # a page for a browser (sso.views.failure_page)
            return response
        # JSON bodies are the view's own answer (the envelope, or a documented shape such as health's 503).
        if response.get("Content-Type", "").startswith("application/json"):
            return response
        status = response.status_code
        replaced = error_response(code_for_status(status), _REASONS.get(status, "The request failed."), status)
        for header in ("Allow", "Retry-After", "WWW-Authenticate"):
            if header in response:
                replaced[header] = response[header]
        return replaced

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if isinstance(exc, AppError):
            return app_error_response(exc)
        if is_api_path(request.path) and isinstance(exc, SuspiciousOperation):
            return error_response("invalid", f"The request was refused: {exc}", 400)
        if is_api_path(request.path):
            logger.exception("Unhandled error on %s %s", request.method, request.path)
            return error_response("internal_error", _REASONS[500], 500)
        return None



def is_token_path(path: str) -> bool:
    """Paths whose callers authenticate with a bearer token (or a webhook's own secret or signature) and never
    use a browser session."""
    return is_api_path(path) or path == "/v1" or path.startswith(("/v1/", "/hooks/"))


class BrowserOnlyMiddleware:
    """Sessions, CSRF, auth, messages and the rest of Django's browser stack, for the pages that use
    them (Django admin); /api and /v1 skip them.

    Those middlewares are sync: on an async view each of their hooks is a crossing to a worker thread,
    which cost about 4 ms per API request (bench/RESULTS.md). Django registers process_view only
    on top-level middleware, so CSRF's is forwarded from here, for browser paths only.
    """

    sync_capable = True
    async_capable = True
    CHAIN = [
        "django.middleware.security.SecurityMiddleware",
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.middleware.common.CommonMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "django.contrib.messages.middleware.MessageMiddleware",
        "django.middleware.clickjacking.XFrameOptionsMiddleware",
    ]

    def __init__(self, get_response: Callable):
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        handler = get_response
        for path in reversed(self.CHAIN):
            instance = import_string(path)(handler)
            if path.endswith("CsrfViewMiddleware"):
                self._csrf = instance
            handler = instance
        self.browser = handler
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest):
        return (self.get_response if is_token_path(request.path) else self.browser)(request)

    async def process_view(self, request: HttpRequest, view, args, kwargs):
        # Async so that Django calls it on the event loop: a sync hook would cost a thread crossing on
        # every request. CSRF's check reads the cookie and the already-read body; it does no I/O.
        if is_token_path(request.path):
            return None
        return self._csrf.process_view(request, view, args, kwargs)

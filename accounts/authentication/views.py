"""The async POST views under /api (the streams, and work a hang-up must cancel): the caller from the Bearer
header, 405 for other methods, and every AppError before a response in the API's envelope."""

from __future__ import annotations

import functools
import logging

from django.http import HttpResponse
from django.views.decorators.csrf import csrf_exempt

from accounts.authentication.bearer import acaller_from_bearer_header
from agentsite.core.errors import AppError, app_error_response, error_response

logger = logging.getLogger(__name__)


def async_post_view(handler, *, schema_view=None):
    """An async POST view under /api (the streams, and work a hang-up must cancel): other methods answer 405,
    the caller comes from the Bearer header, and every AppError before a response leaves in the envelope.
    `handler(request, user, *args, **kwargs)`; `schema_view` documents the route (drf-spectacular reads `cls`).
    """
    @csrf_exempt
    @functools.wraps(handler)
    async def view(request, *args, **kwargs):
        # As DRF's views do: the caller first (401 before 405), then the method; OPTIONS says what is allowed.
        request.api_key = None
        try:
            user, request.api_key = await acaller_from_bearer_header(request.headers.get("Authorization"), "api",
                                                                    "/api")
            if request.method == "POST":
                return await handler(request, user, *args, **kwargs)
        except AppError as exc:
            return app_error_response(exc)
        if request.method == "OPTIONS":
            response = HttpResponse(status=200)
        else:
            response = error_response("method_not_allowed", "Use POST.", 405)
        response["Allow"] = "POST, OPTIONS"
        return response

    if schema_view is not None:
        view.cls, view.initkwargs = schema_view, {}
    return view

"""Input validation shared by DRF views and plain (async) Django views."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest
from rest_framework import serializers

from agentsite.errors import AppError, flatten_details, validation_message


def validated(serializer_class: type[serializers.Serializer], data: Any, **kwargs: Any) -> dict[str, Any]:
    """The serializer's validated data; raises AppError 400 `invalid` with field -> messages details."""
    serializer = serializer_class(data=data, **kwargs)
    if not serializer.is_valid():
        details = flatten_details(serializer.errors)
        raise AppError("invalid", validation_message(details), 400, details)
    return serializer.validated_data


def json_object_body(request: HttpRequest) -> dict[str, Any]:
    """The body of a plain (non-DRF) view as a JSON object; {} when empty.

    Raises AppError 415 `unsupported_media_type` for another Content-Type (a text/plain or form POST is
    what a foreign web page can send without a CORS preflight) and 400 `invalid` for anything not a
    JSON object.
    """
    if not request.body:
        return {}
    if request.content_type != "application/json":
        raise AppError("unsupported_media_type", "Send the body as Content-Type: application/json.", 415)
    try:
        body = json.loads(request.body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise AppError("invalid", "The body is not valid JSON.", 400) from exc
    if not isinstance(body, dict):
        raise AppError("invalid", "The body must be a JSON object.", 400)
    return body

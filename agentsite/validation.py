"""Input validation shared by DRF views and plain (async) Django views."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from agentsite.errors import AppError, flatten_details, validation_message


def validated(serializer_class: type[serializers.Serializer], data: Any, **kwargs: Any) -> dict[str, Any]:
    """The serializer's validated data; raises AppError 400 `invalid` with field -> messages details."""
    serializer = serializer_class(data=data, **kwargs)
    if not serializer.is_valid():
        details = flatten_details(serializer.errors)
        raise AppError("invalid", validation_message(details), 400, details)
    return serializer.validated_data

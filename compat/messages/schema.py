"""The Messages door's routes in /api/schema: schema-only views (compat/schema.py says how they are used)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers

from compat.messages.wire import CountTokensRequest, MessagesRequest
from compat.schema import V1

_ANTHROPIC_ERROR = OpenApiResponse(description='Anthropic error shape: {"type": "error", "error": {type, message}}')



class MessagesSchema(V1):
    @extend_schema(tags=["v1"], summary="Create a message (Anthropic Messages API)",
                   request=MessagesRequest,
                   description="An Anthropic Messages request over any model of /v1/models (docs/api.md, Messages): "
                               "an unknown field is a 400 naming it. Auth as the rest of /v1 (x-api-key or Bearer).",
                   responses={
                       (200, "application/json"): OpenApiResponse(OpenApiTypes.OBJECT, description=(
                           '{id, type: "message", role, model, content: [text|tool_use], stop_reason, '
                           "stop_sequence, usage: {input_tokens, output_tokens}}")),
                       (200, "text/event-stream"): OpenApiResponse(OpenApiTypes.STR, description=(
                           "with stream=true: message_start, ping, content_block_start/delta/stop, message_delta, "
                           "message_stop (or error)")),
                       400: _ANTHROPIC_ERROR, 401: _ANTHROPIC_ERROR, 404: _ANTHROPIC_ERROR, 429: _ANTHROPIC_ERROR,
                       502: _ANTHROPIC_ERROR})
    def post(self, request):  # pragma: no cover - never routed
        raise NotImplementedError


class CountTokensSchema(V1):
    @extend_schema(tags=["v1"], summary="Estimate a Messages request's input tokens",
                   request=CountTokensRequest,
                   responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description="{input_tokens}"),
                              400: _ANTHROPIC_ERROR, 401: _ANTHROPIC_ERROR, 404: _ANTHROPIC_ERROR})
    def post(self, request):  # pragma: no cover - never routed
        raise NotImplementedError


class AnthropicErrorBodySerializer(serializers.Serializer):
    type = serializers.CharField(help_text="invalid_request_error, authentication_error, permission_error, "
                                           "not_found_error, request_too_large, rate_limit_error, api_error or "
                                           "overloaded_error")
    message = serializers.CharField()


class AnthropicErrorSerializer(serializers.Serializer):
    """Anthropic's error shape, which /v1/messages answers so that the anthropic SDK raises the matching exception."""

    type = serializers.ChoiceField(choices=["error"])
    error = AnthropicErrorBodySerializer()

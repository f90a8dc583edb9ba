"""Schema-only DRF views: drf-spectacular documents the async /v1 views through their `cls`."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.views import APIView

_ERROR = OpenApiResponse(description='OpenAI error shape: {"error": {message, type, param, code}}')


class _Public(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]


class ModelsSchema(_Public):
    @extend_schema(tags=["v1"], summary="List models (OpenAI-compatible)",
                   responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description=(
                       '{"object": "list", "data": [{id, object: "model", created, owned_by}]}: the provider '
                       'model, "agent" and "hash-256"')), 401: _ERROR})
    def get(self, request):  # pragma: no cover - never routed
        raise NotImplementedError


class ChatCompletionsSchema(_Public):
    @extend_schema(tags=["v1"], summary="Create a chat completion (OpenAI-compatible)", request=OpenApiTypes.OBJECT,
                   description="An OpenAI chat completion request: model, messages (strings or content-part arrays, "
                               "images as data URLs), stream, temperature, max_tokens, tools, tool_choice, stop, "
                               "stream_options.include_usage. Public unless config compat_auth is 'token'.",
                   responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description=(
                       "A chat.completion object; with stream=true, text/event-stream of chat.completion.chunk "
                       "lines ending with data: [DONE]")), 400: _ERROR, 401: _ERROR, 404: _ERROR, 502: _ERROR})
    def post(self, request):  # pragma: no cover - never routed
        raise NotImplementedError


class EmbeddingsSchema(_Public):
    @extend_schema(tags=["v1"], summary="Create embeddings (the knowledge base's 256-d hash vectors)",
                   request=OpenApiTypes.OBJECT,
                   description='{input: str | [str], model: "hash-256", encoding_format?: "float" | "base64"}',
                   responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description=(
                       '{"object": "list", "data": [{object: "embedding", index, embedding}], model, usage}')),
                       400: _ERROR, 401: _ERROR, 404: _ERROR})
    def post(self, request):  # pragma: no cover - never routed
        raise NotImplementedError

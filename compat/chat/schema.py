"""The chat door's routes in /api/schema: schema-only views (compat/schema.py says how they are used)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers

from compat.chat.wire import ChatCompletionRequest, EmbeddingRequest, ModelCard, ModelList
from compat.schema import ERROR as _ERROR
from compat.schema import V1


class Model(ModelCard):
    """GET /v1/models/{id}'s answer: one ModelCard. A component of its own name, since ModelList's nested
    ModelCard is registered by name only and the class itself would collide with it."""


class ModelsSchema(V1):
    @extend_schema(tags=["v1"], summary="List models (OpenAI-compatible)", operation_id="v1_models_list",
                   description='The provider model, "agent" and "hash-256".',
                   responses={200: ModelList, 401: _ERROR})
    def get(self, request):  # pragma: no cover - never routed
        raise NotImplementedError


class ModelSchema(V1):
    @extend_schema(tags=["v1"], summary="One model (OpenAI-compatible models.retrieve)",
                   operation_id="v1_models_retrieve",
                   description="One entry of GET /v1/models; its id may hold slashes (`<connection>/<model>`).",
                   responses={200: Model, 401: _ERROR,
                              404: OpenApiResponse(description="`model_not_found`: not in the caller's list")})
    def get(self, request, model_id):  # pragma: no cover - never routed
        raise NotImplementedError


class ChatCompletionsSchema(V1):
    @extend_schema(tags=["v1"], summary="Create a chat completion (OpenAI-compatible)",
                   request=ChatCompletionRequest,
                   description="An OpenAI chat completion request (images as data URLs). A field the model's "
                               "upstream cannot carry is a 400 `unsupported_parameter` naming it; a field this server "
                               "does not know, a 400 `unknown_field` unless the connection has passthrough "
                               "(docs/api.md). Public unless config compat_auth is 'token'.",
                   responses={
                       (200, "application/json"): OpenApiResponse(OpenApiTypes.OBJECT,
                                                                  description="A chat.completion object"),
                       (200, "text/event-stream"): OpenApiResponse(OpenApiTypes.STR, description=(
                           "with stream=true: chat.completion.chunk data lines ending with data: [DONE]")),
                       401: _ERROR, 404: OpenApiResponse(description="`model_not_found`"),
                       502: OpenApiResponse(description="`upstream_error`: the provider failed")})
    def post(self, request):  # pragma: no cover - never routed
        raise NotImplementedError


class EmbeddingsSchema(V1):
    @extend_schema(tags=["v1"], summary="Create embeddings (the knowledge base's 256-d hash vectors)",
                   request=EmbeddingRequest,
                   responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description=(
                       '{"object": "list", "data": [{object: "embedding", index, embedding}], model, usage}')),
                       401: _ERROR, 404: OpenApiResponse(description="`model_not_found`")})
    def post(self, request):  # pragma: no cover - never routed
        raise NotImplementedError


class OpenAIErrorBodySerializer(serializers.Serializer):
    message = serializers.CharField()
    type = serializers.CharField(help_text="invalid_request_error, authentication_error, permission_error, "
                                           "rate_limit_error or api_error")
    param = serializers.CharField(allow_null=True)
    code = serializers.CharField(allow_null=True)


class OpenAIErrorSerializer(serializers.Serializer):
    """OpenAI's error shape, which /v1 answers so that SDKs raise the matching exception."""

    error = OpenAIErrorBodySerializer()

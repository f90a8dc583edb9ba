"""Schema-only DRF views: drf-spectacular documents the async /v1 views through their `cls`.

The serializers here only describe OpenAI's wire format for the schema; the views validate with the
pydantic models of compat/schemas.py. Error responses (the OpenAI shape) are added by agentsite.schema.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.views import APIView

from accounts.authentication import JWTAuthentication

_ERROR = OpenApiResponse(description="OpenAI error shape")
_TEXT_PART = {"type": "object", "required": ["type", "text"],
              "properties": {"type": {"type": "string", "enum": ["text"]}, "text": {"type": "string"}}}
_IMAGE_PART = {"type": "object", "required": ["type", "image_url"], "properties": {
    "type": {"type": "string", "enum": ["image_url"]},
    "image_url": {"type": "object", "required": ["url"], "properties": {
        "url": {"type": "string", "description": "a data: URL (base64) or an http(s) URL"},
        "detail": {"type": "string", "nullable": True}}}}}


@extend_schema_field({"oneOf": [{"type": "string"}, {"type": "array", "items": {"oneOf": [_TEXT_PART, _IMAGE_PART]}}],
                      "nullable": True})
class MessageContentField(serializers.JSONField):
    pass


@extend_schema_field({"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
                      "nullable": True})
class StopField(serializers.JSONField):
    pass


@extend_schema_field({"oneOf": [{"type": "string", "enum": ["none", "auto", "required"]}, {"type": "object"}],
                      "nullable": True})
class ToolChoiceField(serializers.JSONField):
    pass


@extend_schema_field({"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"},
                                                       "minItems": 1, "maxItems": 2048}]})
class EmbeddingInputField(serializers.JSONField):
    pass


class FunctionCallSerializer(serializers.Serializer):
    name = serializers.CharField()
    arguments = serializers.CharField(required=False, allow_blank=True, help_text="JSON text")


class ToolCallInSerializer(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["function"], required=False)
    function = FunctionCallSerializer()


class ChatMessageSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=["system", "developer", "user", "assistant", "tool"])
    content = MessageContentField(required=False, help_text="at most 32,000 characters of text")
    name = serializers.CharField(required=False, allow_null=True)
    tool_calls = ToolCallInSerializer(many=True, required=False, allow_null=True)
    tool_call_id = serializers.CharField(required=False, allow_null=True)


class FunctionDefSerializer(serializers.Serializer):
    name = serializers.CharField(min_length=1, max_length=64)
    description = serializers.CharField(required=False, allow_blank=True)
    parameters = serializers.DictField(required=False, help_text="a JSON Schema object")


class ToolDefSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["function"], required=False)
    function = FunctionDefSerializer()


class StreamOptionsSerializer(serializers.Serializer):
    include_usage = serializers.BooleanField(required=False)


class ChatCompletionSerializer(serializers.Serializer):
    model = serializers.CharField(min_length=1, help_text='the provider model (GET /v1/models), or "agent"')
    messages = ChatMessageSerializer(many=True, allow_empty=False)
    stream = serializers.BooleanField(required=False)
    temperature = serializers.FloatField(required=False, allow_null=True, min_value=0, max_value=2)
    max_tokens = serializers.IntegerField(required=False, allow_null=True, min_value=1)
    max_completion_tokens = serializers.IntegerField(required=False, allow_null=True, min_value=1)
    tools = ToolDefSerializer(many=True, required=False, allow_null=True)
    tool_choice = ToolChoiceField(required=False)
    stop = StopField(required=False)
    stream_options = StreamOptionsSerializer(required=False, allow_null=True)
    n = serializers.IntegerField(required=False, min_value=1, max_value=1)


class EmbeddingSerializer(serializers.Serializer):
    input = EmbeddingInputField()
    model = serializers.CharField(help_text='"hash-256"')
    encoding_format = serializers.ChoiceField(choices=["float", "base64"], required=False)


class OpenAIModelSerializer(serializers.Serializer):
    id = serializers.CharField()
    object = serializers.ChoiceField(choices=["model"])
    created = serializers.IntegerField()
    owned_by = serializers.CharField()


class OpenAIModelListSerializer(serializers.Serializer):
    object = serializers.ChoiceField(choices=["list"])
    data = OpenAIModelSerializer(many=True)


class _V1(APIView):
    # Public unless config compat_auth is "token"; a dashboard token, when sent, identifies the caller.
    authentication_classes = [JWTAuthentication]
    permission_classes = [AllowAny]


class ModelsSchema(_V1):
    @extend_schema(tags=["v1"], summary="List models (OpenAI-compatible)",
                   description='The provider model, "agent" and "hash-256".',
                   responses={200: OpenAIModelListSerializer, 401: _ERROR})
    def get(self, request):  # pragma: no cover - never routed
        raise NotImplementedError


class ChatCompletionsSchema(_V1):
    @extend_schema(tags=["v1"], summary="Create a chat completion (OpenAI-compatible)",
                   request=ChatCompletionSerializer,
                   description="An OpenAI chat completion request (images as data URLs). Public unless config "
                               "compat_auth is 'token'.",
                   responses={
                       (200, "application/json"): OpenApiResponse(OpenApiTypes.OBJECT,
                                                                  description="A chat.completion object"),
                       (200, "text/event-stream"): OpenApiResponse(OpenApiTypes.STR, description=(
                           "with stream=true: chat.completion.chunk data lines ending with data: [DONE]")),
                       401: _ERROR, 404: OpenApiResponse(description="`model_not_found`"),
                       502: OpenApiResponse(description="`upstream_error`: the provider failed")})
    def post(self, request):  # pragma: no cover - never routed
        raise NotImplementedError


class EmbeddingsSchema(_V1):
    @extend_schema(tags=["v1"], summary="Create embeddings (the knowledge base's 256-d hash vectors)",
                   request=EmbeddingSerializer,
                   responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description=(
                       '{"object": "list", "data": [{object: "embedding", index, embedding}], model, usage}')),
                       401: _ERROR, 404: OpenApiResponse(description="`model_not_found`")})
    def post(self, request):  # pragma: no cover - never routed
        raise NotImplementedError

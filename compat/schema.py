"""/v1 in /api/schema, generated from the pydantic models of compat/schemas.py (the one definition of its wire formats).

drf-spectacular documents the async /v1 views through their `cls` (compat/api.py attaches the schema-only
views below). Their bodies are the pydantic models themselves: `WireModelExtension` turns a model's JSON
Schema (pydantic's, draft 2020-12) into OpenAPI 3.0 components, so a field added to a model is validated and
documented at once. Error responses (the OpenAI shape) are added by agentsite.schema.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.drainage import warn
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ResolvedComponent
from drf_spectacular.settings import spectacular_settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.views import APIView

from accounts.authentication import JWTAuthentication
from compat.messages import CountTokensRequest, MessagesRequest
from compat.responses import ResponseRequest
from compat.schemas import ChatCompletionRequest, EmbeddingRequest, ModelCard, ModelList


class Model(ModelCard):
    """GET /v1/models/{id}'s answer: one ModelCard. A component of its own name, since ModelList's nested
    ModelCard is registered by name only and the class itself would collide with it."""

REF_TEMPLATE = "#/components/schemas/{model}"
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf")
_SUBSCHEMA_MAPS = ("properties", "$defs")
_SUBSCHEMAS = ("items", "additionalProperties", "not")
_NULL = {"type": "null"}


def openapi30(schema: dict[str, Any]) -> dict[str, Any]:
    """A pydantic JSON Schema as an OpenAPI 3.0 schema object: `const` becomes a one-value `enum`, a
    `{"type": "null"}` branch becomes `nullable: true` (a lone `$ref` left is wrapped in `allOf`, as 3.0 ignores
    siblings of `$ref`), and the titles pydantic derives from field names are dropped. Raises ValueError on a
    construct 3.0 cannot say (a list of types)."""
    if isinstance(schema.get("type"), list):
        raise ValueError(f"OpenAPI 3.0 has no list of types: {schema}")
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title":
            continue
        if key == "const":
            out["enum"] = [value]
        elif key in _SUBSCHEMA_MAPS:
            out[key] = {name: openapi30(sub) for name, sub in value.items()}
        elif key in _SUBSCHEMAS and isinstance(value, dict):
            out[key] = openapi30(value)
        elif key in _SUBSCHEMA_LISTS:
            out[key] = [openapi30(sub) for sub in value]
        else:
            out[key] = value
    return _nullable(out)


def _nullable(out: dict[str, Any]) -> dict[str, Any]:
    for key in ("anyOf", "oneOf"):
        branches = [branch for branch in out.get(key, ()) if branch != _NULL]
        if key not in out or len(branches) == len(out[key]):
            continue
        out["nullable"] = True
        if len(branches) > 1:
            out[key] = branches
            continue
        del out[key]
        (only,) = branches
        if "$ref" in only:
            out["allOf"] = [only]
        else:
            out = {**only, **out}
    return out


class WireModelExtension(OpenApiSerializerExtension):
    """Documents a compat.schemas.WireModel given as `request=` or in `responses=` of @extend_schema.

    The component is named after the class (drf-spectacular appends `Request` to request components, so a
    trailing `Request` of the class name is taken off first); nested models become components under their own
    class names. A nested name already used by another component with a different schema is a warning
    (`spectacular --fail-on-warn` fails on it). Requests are described as pydantic validates them, responses
    as it serializes them.
    """

    target_class = "compat.schemas.WireModel"
    match_subclasses = True
    priority = 1  # over drf-spectacular's own pydantic extension, which writes OpenAPI 3.1 into a 3.0 schema

    def get_name(self, auto_schema: AutoSchema, direction: str) -> str:
        name = self.target.__name__
        if direction == "request" and spectacular_settings.COMPONENT_SPLIT_REQUEST:
            name = name.removesuffix("Request")
        return name

    def map_serializer(self, auto_schema: AutoSchema, direction: str) -> dict[str, Any]:
        mode = "validation" if direction == "request" else "serialization"
        schema = openapi30(self.target.model_json_schema(ref_template=REF_TEMPLATE, mode=mode))
        for name, sub_schema in schema.pop("$defs", {}).items():
            component = ResolvedComponent(name=name, type=ResolvedComponent.SCHEMA, object=name, schema=sub_schema)
            if component in auto_schema.registry and auto_schema.registry[component].schema != sub_schema:
                warn(f"{self.target.__name__}: the component {name!r} already documents something else; rename "
                     f"the model.")
            auto_schema.registry.register_on_missing(component)
        return schema


_ERROR = OpenApiResponse(description="OpenAI error shape")


class _V1(APIView):
    # Public unless config compat_auth is "token"; a dashboard token, when sent, identifies the caller.
    authentication_classes = [JWTAuthentication]
    permission_classes = [AllowAny]


class ModelsSchema(_V1):
    @extend_schema(tags=["v1"], summary="List models (OpenAI-compatible)", operation_id="v1_models_list",
                   description='The provider model, "agent" and "hash-256".',
                   responses={200: ModelList, 401: _ERROR})
    def get(self, request):  # pragma: no cover - never routed
        raise NotImplementedError


class ModelSchema(_V1):
    @extend_schema(tags=["v1"], summary="One model (OpenAI-compatible models.retrieve)",
                   operation_id="v1_models_retrieve",
                   description="One entry of GET /v1/models; its id may hold slashes (`<connection>/<model>`).",
                   responses={200: Model, 401: _ERROR,
                              404: OpenApiResponse(description="`model_not_found`: not in the caller's list")})
    def get(self, request, model_id):  # pragma: no cover - never routed
        raise NotImplementedError


class ChatCompletionsSchema(_V1):
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


class EmbeddingsSchema(_V1):
    @extend_schema(tags=["v1"], summary="Create embeddings (the knowledge base's 256-d hash vectors)",
                   request=EmbeddingRequest,
                   responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description=(
                       '{"object": "list", "data": [{object: "embedding", index, embedding}], model, usage}')),
                       401: _ERROR, 404: OpenApiResponse(description="`model_not_found`")})
    def post(self, request):  # pragma: no cover - never routed
        raise NotImplementedError


class ResponsesSchema(_V1):
    @extend_schema(tags=["v1"], summary="Create a response (OpenAI Responses API)",
                   request=ResponseRequest,
                   description="An OpenAI Responses API request (docs/api.md lists the supported, ignored and "
                               "refused fields). Public unless config compat_auth says otherwise.",
                   responses={
                       (200, "application/json"): OpenApiResponse(OpenApiTypes.OBJECT,
                                                                  description="A response object"),
                       (200, "text/event-stream"): OpenApiResponse(OpenApiTypes.STR, description=(
                           "with stream=true: typed response.* events, each with sequence_number")),
                       400: _ERROR, 401: _ERROR,
                       404: OpenApiResponse(description="`model_not_found`, or `not_found` (previous_response_id)"),
                       502: OpenApiResponse(description="`upstream_error`: the provider failed")})
    def post(self, request):  # pragma: no cover - never routed
        raise NotImplementedError


_ANTHROPIC_ERROR = OpenApiResponse(description='Anthropic error shape: {"type": "error", "error": {type, message}}')


class MessagesSchema(_V1):
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


class ResponseInputItemsSchema(_V1):
    @extend_schema(tags=["v1"], summary="A stored response's input items (its owner's only)",
                   responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description=(
                       '{"object": "list", "data": [item], "first_id", "last_id", "has_more"}')),
                       400: _ERROR, 401: _ERROR, 404: OpenApiResponse(description="`not_found`: none, or not yours")})
    def get(self, request, pk):  # pragma: no cover - never routed
        raise NotImplementedError


class ResponseSchema(_V1):
    @extend_schema(tags=["v1"], summary="A stored response (its owner's only)",
                   responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description="The response object"),
                              401: _ERROR, 404: OpenApiResponse(description="`not_found`: none, or not yours")})
    def get(self, request, pk):  # pragma: no cover - never routed
        raise NotImplementedError

    @extend_schema(tags=["v1"], summary="Delete a stored response (its owner's only)",
                   responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description=(
                       '{"id", "object": "response.deleted", "deleted": true}')),
                       401: _ERROR, 404: OpenApiResponse(description="`not_found`: none, or not yours")})
    def delete(self, request, pk):  # pragma: no cover - never routed
        raise NotImplementedError


class CountTokensSchema(_V1):
    @extend_schema(tags=["v1"], summary="Estimate a Messages request's input tokens",
                   request=CountTokensRequest,
                   responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description="{input_tokens}"),
                              400: _ANTHROPIC_ERROR, 401: _ANTHROPIC_ERROR, 404: _ANTHROPIC_ERROR})
    def post(self, request):  # pragma: no cover - never routed
        raise NotImplementedError

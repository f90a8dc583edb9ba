"""The Responses door's routes in /api/schema: schema-only views (compat/schema.py says how they are used)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema

from compat.responses.wire import ResponseRequest
from compat.schema import ERROR as _ERROR
from compat.schema import V1


class ResponsesSchema(V1):
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


class ResponseInputItemsSchema(V1):
    @extend_schema(tags=["v1"], summary="A stored response's input items (its owner's only)",
                   responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description=(
                       '{"object": "list", "data": [item], "first_id", "last_id", "has_more"}')),
                       400: _ERROR, 401: _ERROR, 404: OpenApiResponse(description="`not_found`: none, or not yours")})
    def get(self, request, pk):  # pragma: no cover - never routed
        raise NotImplementedError


class ResponseSchema(V1):
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

"""The OpenAPI schema's generic parts: the bearer security scheme and every operation's error responses.

Views declare their success responses; which errors an operation can answer follows from what it is
(docs/api.md, Conventions), so it is decided here once rather than restated on every view: 401 unless public,
403 where a permission is admin-only, 404 where the path has an id, 400/413/415 where there is a body,
400 where a list takes limit/offset, 429 on login. A view adds its own (409, 502, ...) with a
description-only `OpenApiResponse`, and gets the error schema filled in here. /v1 speaks OpenAI's shape.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers
from rest_framework.permissions import AllowAny, IsAdminUser

from agentsite.core.errors import error_shape_for
from agentsite.core.permissions import IsAdmin

# Operations with a per-client rate limit (accounts.ratelimit): they can answer 429 with Retry-After.
RATE_LIMITED = {("POST", "/api/auth/login")}
BODY_METHODS = ("POST", "PUT", "PATCH")

ERROR_DESCRIPTIONS = {
    400: "invalid (details: field -> messages), or another 400 code the operation names",
    401: "not_authenticated or token_invalid",
    403: "forbidden",
    404: "not_found",
    409: "conflict",
    413: "payload_too_large: the body is over 10 MB",
    415: "unsupported_media_type: send Content-Type: application/json",
    429: "rate_limited: see Retry-After",
    502: "upstream_error: the LLM, an MCP server or a voice provider failed",
    503: "unavailable",
}


class ApiErrorBodySerializer(serializers.Serializer):
    code = serializers.CharField(help_text="snake_case, stable: what a client branches on")
    message = serializers.CharField(help_text="a sentence a person can act on")
    details = serializers.DictField(help_text="for `invalid`: field -> list of messages")
    request_id = serializers.CharField(required=False, help_text="the request's id, as in its X-Request-Id header")


class ApiErrorSerializer(serializers.Serializer):
    """The one error envelope of /api."""

    error = ApiErrorBodySerializer()


class BearerJWTScheme(OpenApiAuthenticationExtension):
    target_class = "accounts.authentication.JWTAuthentication"
    name = "bearerAuth"
    priority = 1  # over drf-spectacular's own simplejwt extension, which names it differently

    def get_security_definition(self, auto_schema: AutoSchema) -> dict[str, Any]:
        return {"type": "http", "scheme": "bearer", "bearerFormat": "JWT",
                "description": "An access token from POST /api/auth/login (or register, refresh)."}


class AppAutoSchema(AutoSchema):
    """drf-spectacular's AutoSchema plus the error responses every operation can give (see module docstring)."""

    def _get_response_bodies(self, direction: str = "response") -> dict[str, Any]:
        responses = super()._get_response_bodies(direction)
        for status in self.error_statuses():
            responses.setdefault(str(status), {"description": ERROR_DESCRIPTIONS[status]})
        error_schema = self._error_schema(direction)
        for code, response in responses.items():
            if code[0] in "45" and not response.get("content"):
                response["content"] = {"application/json": {"schema": error_schema}}
            if code == "429":
                response.setdefault("headers", {})["Retry-After"] = {
                    "schema": {"type": "integer"}, "description": "Seconds until another attempt is counted."}
        return dict(sorted(responses.items()))

    def error_statuses(self) -> set[int]:
        statuses: set[int] = set()
        if not self._is_public():
            statuses.add(401)
        if self._is_admin_only():
            statuses.add(403)
        if "{" in self.path:
            statuses.add(404)
        if self.method in BODY_METHODS and self.get_request_serializer() is not None:
            statuses |= {400, 413, 415}
        if self._is_list_view() and self._get_paginator() is not None:
            statuses.add(400)  # limit/offset that are not non-negative integers
        if (self.method, self.path) in RATE_LIMITED:
            statuses.add(429)
        return statuses

    def _permissions(self) -> list:
        try:
            return list(self.view.get_permissions())
        except Exception:  # a view whose permissions need a real request: assume the default (authenticated)
            return []

    def _is_public(self) -> bool:
        permissions = self._permissions()
        return bool(permissions) and all(isinstance(permission, AllowAny) for permission in permissions)

    def _is_admin_only(self) -> bool:
        admin_classes = (IsAdmin, IsAdminUser)  # a tuple: DRF permission classes overload `|`
        return any(isinstance(permission, admin_classes) for permission in self._permissions())

    def _error_schema(self, direction: str) -> dict[str, Any]:
        shape = error_shape_for(self.path)  # a door's own shape (compat.doors), else the /api envelope
        serializer = shape.schema if shape is not None and shape.schema is not None else ApiErrorSerializer
        return self.resolve_serializer(serializer, direction).ref

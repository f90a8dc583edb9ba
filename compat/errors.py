"""Errors in the OpenAI shape, so SDKs raise the matching exception class."""

from __future__ import annotations

import json

from django.http import JsonResponse

from agentsite.errors import AppError

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "invalid_request_error", 413: "invalid_request_error", 415: "invalid_request_error",
          422: "invalid_request_error", 429: "rate_limit_error"}


class OpenAIError(Exception):
    def __init__(self, status: int, message: str, *, code: str | None = None, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param

    @classmethod
    def from_app_error(cls, exc: AppError) -> OpenAIError:
        param = next(iter(exc.details), None) if exc.status == 400 and exc.details else None
        return cls(exc.status, exc.message, code=exc.code, param=param)

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": _TYPES.get(self.status, "api_error"),
                          "param": self.param, "code": self.code}}

    def response(self) -> JsonResponse:
        response = JsonResponse(self.body(), status=self.status)
        if self.status == 401:
            response["WWW-Authenticate"] = 'Bearer realm="v1"'
        return response

    def sse(self) -> bytes:
        return f"data: {json.dumps(self.body())}\n\n".encode()

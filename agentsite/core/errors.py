"""One error type for the whole service, and its rendering in the /api envelope."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import SuspiciousOperation
from django.http import Http404, JsonResponse
from rest_framework import exceptions as drf
from rest_framework.response import Response

from agentsite.core.logs import REQUEST_ID

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ErrorCode:
    """A code the API may answer: the statuses it comes with, and what it means to a client."""

    statuses: tuple[int, ...]
    meaning: str


# Every code any door can answer (/api's envelope, /v1's `code`, an SSE `error` event), in one table. A code
# raised anywhere that is missing here fails tests/foundation/test_error_codes.py, which also checks that
# docs/api.md lists this table.
ERROR_CODES: dict[str, ErrorCode] = {
    "invalid": ErrorCode((400,), "The request is malformed or a field's value is not accepted; `details` names each."),
    "invalid_value": ErrorCode((400,), "/v1: a field of the request has a value the API does not take."),
    "unknown_field": ErrorCode((400,), "The body has a field the endpoint does not take; `details` names each."),
    "unsupported_parameter": ErrorCode((400,), "/v1: a request field the model or its upstream's wire format "
                                               "cannot carry; `param` names it."),
    "invalid_host": ErrorCode((400,), "The Host header names a host this server does not serve."),
    "invalid_image": ErrorCode((400,), "An attached or sent image cannot be decoded as the image it claims to be."),
    "empty_document": ErrorCode((400,), "A knowledge-base document has no text."),
    "unreadable_document": ErrorCode((400,), "A knowledge-base file is not readable text (binary, bad encoding, "
                                             "damaged PDF)."),
    "message_too_long": ErrorCode((400,), "A chat message is longer than 32,000 characters."),
    "not_authenticated": ErrorCode((401,), "No credential was sent where one is needed."),
    "token_invalid": ErrorCode((401,), "The credential is malformed, expired, revoked, or its user is inactive."),
    "invalid_credentials": ErrorCode((401,), "Log-in with a wrong username or password."),
    "invalid_api_key": ErrorCode((401,), "/v1: no credential the server's compat_auth setting accepts, or an API key "
                                         "that is unknown, revoked, expired, or whose user is inactive or changed "
                                         "password."),
    "forbidden": ErrorCode((403,), "The caller may not do this (an admin operation, or an Origin not allowed)."),
    "signature_invalid": ErrorCode((401,), "A webhook: no secret or signature, or not this trigger's."),
    "signature_expired": ErrorCode((401,), "A webhook: X-Agentsite-Timestamp is more than 5 minutes from the server's "
                                           "clock."),
    "trigger_disabled": ErrorCode((403,), "A webhook: the trigger is disabled."),
    "signature_replayed": ErrorCode((409,), "A webhook: this signature was already used (a replay)."),
    "key_scope": ErrorCode((403,), "The API key's scopes do not include this door (`v1`, `mcp`, `api`)."),
    "model_not_allowed": ErrorCode((403,), "The model is not one the caller's groups allow them to use (their "
                                           "groups' `models`); GET /v1/models lists those they do."),
    "registration_closed": ErrorCode((403,), "Registration is closed on this server."),
    "password_login_disabled": ErrorCode((403,), "Password sign-in is off (`AGENTSITE_PASSWORD_LOGIN=0`) and the user "
                                                 "is not break-glass, or the credentials are wrong (change-password: "
                                                 "the caller is not break-glass)."),
    "not_found": ErrorCode((404,), "Nothing of that id (or nothing the caller may see)."),
    "model_not_found": ErrorCode((404,), "No model of that name for this caller: not in /v1/models (an alias, a "
                                             "`<connection>/<model>`, agent, workflow:*, hash-256)."),
    "method_not_allowed": ErrorCode((405,), "The path does not take this HTTP method."),
    "not_acceptable": ErrorCode((406,), "The Accept header asks for a format the endpoint does not produce."),
    "conflict": ErrorCode((409,), "The name is taken, or the object's state does not allow this now."),
    "workflow_waiting": ErrorCode((409,), "/v1 and workflow tools: the workflow stopped at an approval node; the "
                                          "run goes on once decided (`details.run_id`)."),
    "payload_too_large": ErrorCode((413,), "The body (or a file, or a part of it) is over its size limit."),
    "quota_exceeded": ErrorCode((413,), "Storing this would pass the user's quota (uploads, knowledge base)."),
    "unsupported_media_type": ErrorCode((415,), "The body's Content-Type (or a file's type) is not one the "
                                                "endpoint takes."),
    "unprocessable": ErrorCode((422,), "The request is well-formed but cannot be carried out as it stands."),
    "headers_too_large": ErrorCode((431,), "The request line and headers together are over 16,384 bytes, or "
                                           "there are more than 500 headers."),
    "rate_limited": ErrorCode((429,), "Too many requests (log-in, registration, a per-minute LLM limit); "
                                      "Retry-After says when to retry."),
    "budget_exceeded": ErrorCode((429,), "The caller's (or the key's) token or cost budget for the day or month is "
                                         "spent; Retry-After says when it renews."),
    "internal_error": ErrorCode((500,), "The server failed; the error was logged. Always a bug."),
    "upstream_error": ErrorCode((400, 404, 409, 413, 422, 429, 502),
                                "The LLM, an MCP server, a voice provider or a search engine failed (502), or the LLM "
                                "refused the request with a 4xx the caller can act on (its status, and on /v1 its own "
                                "`type`, `code` and `param`); the message carries its words."),
    "workflow_failed": ErrorCode((502,), "/v1: the workflow behind a `workflow:` model ended with an error."),
    "mcp_connect_failed": ErrorCode((502,), "The MCP server could not be started or reached."),
    "remote_unreachable": ErrorCode((502,), "A remote A2A agent's card could not be read (connect error, timeout, "
                                            "a status other than 200, too large)."),
    "card_invalid": ErrorCode((422,), "What a remote A2A agent's URL answers is not an agent card this client can "
                                      "use (the message says why)."),
    "unavailable": ErrorCode((503,), "A part of the server is not available now (the database, the sandbox, a "
                                     "provider not set up)."),
    "insufficient_storage": ErrorCode((507,), "The data directory's disk is nearly full; nothing was stored."),
}


class AppError(Exception):
    """An error a client can act on: a snake_case code, a sentence, an HTTP status, and details."""

    def __init__(self, code: str, message: str, status: int = 400, details: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.details = details or {}
        self.headers = headers or {}

    def __repr__(self) -> str:
        return f"AppError({self.code!r}, {self.message!r}, status={self.status})"


def envelope(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """The /api error body; `request_id` is the request's (agentsite.core.logs) when there is one."""
    error = {"code": code, "message": message, "details": details or {}}
    request_id = REQUEST_ID.get()
    if request_id is not None:
        error["request_id"] = request_id
    return {"error": error}


# /v1 speaks OpenAI's error shape (docs/api.md), so that SDKs raise the matching exception class.
_OPENAI_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                 404: "invalid_request_error", 405: "invalid_request_error", 409: "invalid_request_error",
                 413: "invalid_request_error", 415: "invalid_request_error", 422: "invalid_request_error",
                 429: "rate_limit_error"}


def openai_envelope(code: str | None, message: str, status: int, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": _OPENAI_TYPES.get(status, "api_error"), "param": param,
                      "code": code}}


def openai_param(exc: AppError) -> str | None:
    """The request field a 400 (or a 404 of a field's id: `previous_response_id`) names, its first detail key,
    for OpenAI's `param`; an upstream's refusal names the upstream's own."""
    if exc.code == "upstream_error":
        return exc.details.get("param")
    return next(iter(exc.details), None) if exc.status in (400, 404) and exc.details else None


def openai_error(exc: AppError) -> dict[str, Any]:
    """An AppError in OpenAI's error shape. An upstream's refusal (a 4xx, `upstream_error` with the upstream's
    `type`/`code` in its details) carries the upstream's own `type` and `code`, as the upstream sent them."""
    body = openai_envelope(exc.code, exc.message, exc.status, openai_param(exc))
    if exc.code == "upstream_error" and exc.status < 500:
        error = body["error"]
        error["type"] = exc.details.get("type") or error["type"]
        error["code"] = exc.details.get("code") or error["code"]
    return body


# /v1/messages speaks Anthropic's error shape, so that the anthropic SDK raises the matching exception class.
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 405: "invalid_request_error", 409: "invalid_request_error",
                    413: "request_too_large", 415: "invalid_request_error", 422: "invalid_request_error",
                    431: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error", 529: "overloaded_error"}


def anthropic_envelope(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": _ANTHROPIC_TYPES.get(status, "api_error"), "message": message}}


def openai_body(code: str, message: str, status: int, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """OpenAI's error shape of a refusal made before a view (a 400's first detail key as `param`)."""
    param = next(iter(details), None) if status == 400 and details else None
    return openai_envelope(code, message, status, param)


def anthropic_body(code: str, message: str, status: int, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """Anthropic's error shape of a refusal made before a view."""
    return anthropic_envelope(status, message)


@dataclass(frozen=True)
class ErrorShape:
    """The error body the clients of a path expect, for what is refused before a view answers in its own words
    (a body gate's 401, a body over the limit) and for /api/schema. `prefix`: a path and everything under it;
    `body(code, message, status, details)`; `schema`: the serializer that documents it (None: the /api one)."""

    prefix: str
    body: Callable[[str, str, int, dict[str, Any] | None], dict[str, Any]]
    schema: Any = None


_SHAPES: list[ErrorShape] = []  # the longest prefix first


def register_error_shape(shape: ErrorShape) -> None:
    """A door's error shape under its prefix (compat/apps.py registers each door's); the same prefix again
    replaces it."""
    kept = [known for known in _SHAPES if known.prefix != shape.prefix]
    _SHAPES[:] = sorted([*kept, shape], key=lambda known: -len(known.prefix))


def error_shape_for(path: str) -> ErrorShape | None:
    """The shape registered under the longest prefix of `path`; None: the /api envelope."""
    return next((shape for shape in _SHAPES
                 if path == shape.prefix or path.startswith(shape.prefix.rstrip("/") + "/")), None)


def envelope_for(path: str, code: str, message: str, status: int,
                 details: dict[str, Any] | None = None) -> dict[str, Any]:
    """The error body a client of this path expects: its door's shape (error_shape_for), else the /api envelope."""
    shape = error_shape_for(path)
    return shape.body(code, message, status, details) if shape is not None else envelope(code, message, details)


def error_response(code: str, message: str, status: int, details: dict | None = None,
                   headers: dict[str, str] | None = None) -> JsonResponse:
    response = JsonResponse(envelope(code, message, details), status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def app_error_response(exc: AppError) -> JsonResponse:
    return error_response(exc.code, exc.message, exc.status, exc.details, exc.headers)


_STATUS_CODES = {
    400: "invalid",
    401: "not_authenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "unprocessable",
    429: "rate_limited",
    500: "internal_error",
    502: "upstream_error",
    503: "unavailable",
}


def code_for_status(status: int) -> str:
    return _STATUS_CODES.get(status, "error")


def flatten_details(detail: Any) -> dict[str, Any]:
    if isinstance(detail, dict):
        return {key: _as_messages(value) for key, value in detail.items()}
    if isinstance(detail, list):
        return {"non_field_errors": _as_messages(detail)}
    return {}


def _as_messages(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _as_messages(inner) for key, inner in value.items()}
    if isinstance(value, list):
        return [_as_messages(inner) if isinstance(inner, dict | list) else str(inner) for inner in value]
    return [str(value)]


def validation_message(details: dict[str, Any]) -> str:
    for field, messages in details.items():
        first = messages[0] if isinstance(messages, list) and messages else messages
        if field == "non_field_errors":
            return str(first)
        return f"{field}: {first}"
    return "The request is not valid."


def drf_exception_handler(exc: Exception, context: dict) -> Response:
    """Render every exception a DRF view raises in the /api envelope."""
    if isinstance(exc, AppError):
        return Response(envelope(exc.code, exc.message, exc.details), status=exc.status, headers=exc.headers)
    if isinstance(exc, Http404):
        return Response(envelope("not_found", "Not found."), status=404)
    if isinstance(exc, SuspiciousOperation):  # too many fields, a malformed multipart body, ...
        return Response(envelope("invalid", f"The request was refused: {exc}"), status=400)
    if isinstance(exc, drf.ValidationError):
        details = flatten_details(exc.detail)
        return Response(envelope("invalid", validation_message(details), details), status=400)
    if isinstance(exc, drf.APIException):
        code = code_for_status(exc.status_code)
        if isinstance(exc, drf.AuthenticationFailed) and getattr(exc, "get_codes", None):
            codes = exc.get_codes()
            if codes in ("token_not_valid", "user_inactive", "user_not_found") or isinstance(codes, dict):
                code = "token_invalid"
        if isinstance(exc, drf.ParseError):
            code = "invalid"
        detail = exc.detail if isinstance(exc.detail, str) else validation_message(flatten_details(exc.detail))
        headers = {}
        # Throttled sets `wait` in __init__; the stubs leave it out.
        if isinstance(exc, drf.Throttled) and exc.wait:  # type: ignore[attr-defined]
            headers["Retry-After"] = str(int(exc.wait))  # type: ignore[attr-defined]
        if exc.status_code == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="api"'
        return Response(envelope(code, str(detail)), status=exc.status_code, headers=headers)
    logger.exception("Unhandled error in %s", context.get("view").__class__.__name__ if context.get("view") else "view")
    return Response(envelope("internal_error", "The server failed; the error was logged."), status=500)

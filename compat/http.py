"""What every /v1 door does with a request before its dialect starts: who calls (compat_auth, then
accounts.caller), the body held to the request model (a 400 naming the field), and a view whose every error
leaves in the door's own error shape."""

from __future__ import annotations

import io
import ipaddress
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from pydantic import BaseModel, ValidationError

from accounts import caller
from accounts.authentication import bearer_token, is_api_key, is_token_shaped
from accounts.caller import ANONYMOUS, Identity
from accounts.ratelimit import client_ip
from agentsite.core.dbcall import db
from agentsite.core.errors import AppError
from catalogue.selectors import config_get, config_peek
from oauth.tokens import is_access_token

logger = logging.getLogger(__name__)

Handler = Callable[..., Awaitable[HttpResponse]]
ErrorResponse = Callable[[AppError], HttpResponse]

# Where the body gate (gate below, run by agentsite.server.asgi_limits before the body is read) leaves the
# caller it resolved (an accounts.caller.Identity), so that the view does not resolve it again.
CALLER_SCOPE_KEY = "agentsite.v1_caller"


async def request_caller(request: HttpRequest) -> Identity:
    """The request's caller (ANONYMOUS for one that `compat_auth` lets in without a credential); sets
    `request.api_key`. The body gate usually resolved it already, before the body was read."""
    resolved = getattr(request, "scope", {}).get(CALLER_SCOPE_KEY)
    if resolved is None:
        resolved = await resolve_caller(request)
    request.api_key = resolved.key  # type: ignore[attr-defined]
    return resolved


async def resolve_caller(request: HttpRequest) -> Identity:
    """A credential is presented when `Authorization: Bearer` or `x-api-key` (the Bearer first) carries an API
    key (`ask-...`) or a JWT-shaped dashboard token; it identifies the caller in every mode, and one that does not
    stand is refused (401), never taken for an anonymous placeholder; a key without the `v1` scope is refused
    (403). Anything else in those headers is a placeholder: an anonymous caller, served as `compat_auth` says."""
    raw = presented_credential(request.headers.get("Authorization"), request.headers.get("x-api-key"))
    if raw is not None:
        try:
            return await caller.resolve(raw, scope="v1", where="/v1")
        except caller.Refused as exc:
            raise AppError("invalid_api_key", exc.detail, 401) from exc
    config = config_peek() or await db(config_get)
    if config.compat_auth == "public":
        return ANONYMOUS
    if config.compat_auth == "local":
        if is_loopback(client_ip(request)):
            return ANONYMOUS
        raise AppError("invalid_api_key", "This server answers anonymous /v1 requests from its own host only "
                       "(compat_auth is 'local'): send an API key (Authorization: Bearer ask-... or x-api-key) "
                       "or a dashboard token.", 401)
    raise AppError("invalid_api_key", f"This server requires an API key or a dashboard token (compat_auth is "
                   f"'{config.compat_auth}'): send Authorization: Bearer ask-... or x-api-key.", 401)


def presented_credential(authorization: str | None, x_api_key: str | None) -> str | None:
    """The credential a /v1 request presents (an `ask-` key, or a JWT-shaped token as Bearer), or None for a
    placeholder; raises AppError 401 for a token in `x-api-key`, which carries API keys only, and for an OAuth
    access token anywhere (its audience is /mcp)."""
    bearer = bearer_token(authorization)
    extra = (x_api_key or "").strip()
    if is_access_token(bearer) or is_access_token(extra):  # never a placeholder: refused, not anonymous
        raise AppError("invalid_api_key", "An OAuth access token (asa-...) is for /mcp only: send an API key "
                       "(ask-...) or a dashboard token.", 401)
    if bearer and (is_api_key(bearer) or is_token_shaped(bearer)):
        return bearer
    if is_api_key(extra):
        return extra
    if is_token_shaped(extra):
        raise AppError("invalid_api_key", "x-api-key carries API keys (ask-...) only: send a dashboard token as "
                       "Authorization: Bearer.", 401)
    return None


async def gate(scope: dict[str, Any]) -> AppError | None:
    """The body gate of /v1 (agentsite.core.bodygate): the caller resolved from the headers alone, before a byte
    of the body is read, and left in the scope for the view; the AppError that refuses it otherwise."""
    request = ASGIRequest(scope, io.BytesIO())
    try:
        scope[CALLER_SCOPE_KEY] = await resolve_caller(request)
    except AppError as exc:
        return exc
    return None


def is_loopback(address: str) -> bool:
    """Whether a client address (as accounts.ratelimit.client_ip gives it) is this host's loopback."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool((mapped or ip).is_loopback)


def validate_body(body: dict[str, Any], schema: type[BaseModel]) -> Any:
    """A JSON object body (from compat.limits.parsed_body) as the request model; AppError 400 naming the field it
    breaks (`unknown_field` for a field a model forbids)."""
    try:
        return schema.model_validate(body)
    except ValidationError as exc:
        path, error = telling_error(exc)
        param = ".".join(str(part) for part in path) or None
        unknown = error["type"] == "extra_forbidden"
        text = "This field is not supported (docs/api.md)." if unknown else error["msg"]
        message = f"{param}: {text}" if param else text
        raise AppError("unknown_field" if unknown else "invalid_value", message, 400,
                       {param: [text]} if param else {}) from exc


def telling_error(exc: ValidationError) -> tuple[tuple[Any, ...], Any]:
    """The field path and error to report. For a union field (`input: str | list[str]`) pydantic reports one
    error per branch; the one past the type check (a list that is too long) says what to fix, "not a string"
    does not."""
    errors = [(_field_path(error["loc"]), error) for error in exc.errors()]
    first_path = errors[0][0]
    same_field = [(path, error) for path, error in errors if path[:len(first_path)] == first_path]
    return next(((path, error) for path, error in same_field if not error["type"].endswith("_type")), errors[0])


def _field_path(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    # pydantic names the union branch it tried inside `loc` ('str', 'list[str]', 'ContentPartText'): not a
    # field of the request, whose names are all snake_case.
    return tuple(part for part in loc if not (isinstance(part, str) and (
        "[" in part or part[:1].isupper() or part in {"str", "int", "float", "bool", "dict", "list"})))


def door_view(handler: Handler, error_response: ErrorResponse, methods: tuple[str, ...] = ("POST",)) -> Handler:
    """An async view whose every error leaves as `error_response` renders it (the door's dialect)."""

    @csrf_exempt
    async def view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method not in methods:
            response = error_response(AppError("method_not_allowed", f"Use {' or '.join(methods)}.", 405))
            response["Allow"] = ", ".join(methods)
            return response
        try:
            return await handler(request, *args, **kwargs)
        except AppError as exc:
            return error_response(exc)
        except Exception:  # a boundary: a 500 in the door's shape, logged
            logger.exception("Unhandled error on %s", request.path)
            return error_response(AppError("internal_error", "The server failed; the error was logged.", 500))

    return view

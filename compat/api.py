"""/v1 views: models, chat completions and embeddings in OpenAI's wire format (the work is in `compat.engine`).

Each view authenticates (config `compat_auth`), parses the body into the request model, calls the engine
and renders its result. Every error leaves as one AppError rendered in OpenAI's error shape.
"""

from __future__ import annotations

import io
import ipaddress
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from pydantic import BaseModel, ValidationError
from rest_framework_simplejwt.exceptions import AuthenticationFailed, InvalidToken

from accounts.authentication import (
    KeyCredential,
    aauthenticate_key,
    aauthenticate_token,
    bearer_token,
    failure_detail,
    is_api_key,
    is_token_shaped,
    revocable,
    scope_problem,
)
from accounts.ratelimit import client_ip
from agentsite.agent.config import aget_settings
from agentsite.agent.usage import Caller
from agentsite.core.dbcall import db
from agentsite.core.errors import AppError, openai_error
from agentsite.core.sse import sse_event, sse_response
from catalogue.selectors import config_get, config_peek
from compat import engine
from compat.limits import parsed_body
from compat.schemas import ChatCompletionRequest, EmbeddingRequest

logger = logging.getLogger(__name__)

Handler = Callable[..., Awaitable[HttpResponse]]


def openai_error_response(exc: AppError) -> JsonResponse:
    """An AppError in OpenAI's error shape, so that SDKs raise the matching exception class."""
    response = JsonResponse(openai_error(exc), status=exc.status)
    for name, value in exc.headers.items():
        response[name] = value
    if exc.status == 401 and "WWW-Authenticate" not in exc.headers:
        response["WWW-Authenticate"] = 'Bearer realm="v1"'
    return response


def openai_error_event(exc: AppError) -> bytes:
    """An AppError as the error chunk that ends a started /v1 stream (SDKs raise it as an APIError)."""
    return sse_event(openai_error(exc))


# Where the body gate (gate below, run by agentsite.server.asgi_limits before the body is read) leaves the
# caller it resolved, so that the view does not resolve it again: (user, key, credential).
CALLER_SCOPE_KEY = "agentsite.v1_caller"


async def _caller(request: HttpRequest) -> tuple[Any, Any]:
    """(user, credential) of the request, both None for an anonymous caller that `compat_auth` lets in; sets
    `request.api_key`. The body gate usually resolved it already, before the body was read."""
    resolved = getattr(request, "scope", {}).get(CALLER_SCOPE_KEY)
    if resolved is None:
        resolved = await _resolve_caller(request)
    user, request.api_key, credential = resolved  # type: ignore[attr-defined]
    return user, credential


async def _resolve_caller(request: HttpRequest) -> tuple[Any, Any, Any]:
    """(user, key, credential). A credential is presented when `Authorization: Bearer` or `x-api-key` (the
    Bearer first) carries an API key (`ask-...`) or a JWT-shaped dashboard token; it identifies the caller in
    every mode, and one that does not stand is refused (401), never taken for an anonymous placeholder; a key
    without the `v1` scope is refused (403). Anything else in those headers is a placeholder: an anonymous
    caller, served as `compat_auth` says."""
    raw = presented_credential(request.headers.get("Authorization"), request.headers.get("x-api-key"))
    if raw is not None:
        return await _credential_caller(raw)
    config = config_peek() or await db(config_get)
    if config.compat_auth == "public":
        return None, None, None
    if config.compat_auth == "local":
        if is_loopback(client_ip(request)):
            return None, None, None
        raise AppError("invalid_api_key", "This server answers anonymous /v1 requests from its own host only "
                       "(compat_auth is 'local'): send an API key (Authorization: Bearer ask-... or x-api-key) "
                       "or a dashboard token.", 401)
    raise AppError("invalid_api_key", f"This server requires an API key or a dashboard token (compat_auth is "
                   f"'{config.compat_auth}'): send Authorization: Bearer ask-... or x-api-key.", 401)


def presented_credential(authorization: str | None, x_api_key: str | None) -> str | None:
    """The credential a /v1 request presents (an `ask-` key, or a JWT-shaped token as Bearer), or None for a
    placeholder; raises AppError 401 for a token in `x-api-key`, which carries API keys only."""
    bearer = bearer_token(authorization)
    if bearer and (is_api_key(bearer) or is_token_shaped(bearer)):
        return bearer
    extra = (x_api_key or "").strip()
    if is_api_key(extra):
        return extra
    if is_token_shaped(extra):
        raise AppError("invalid_api_key", "x-api-key carries API keys (ask-...) only: send a dashboard token as "
                       "Authorization: Bearer.", 401)
    return None


async def _credential_caller(raw: str) -> tuple[Any, Any, Any]:
    try:
        if not is_api_key(raw):
            user, token = await aauthenticate_token(raw)
            return user, None, token
        user, key = await aauthenticate_key(raw)
    except (AuthenticationFailed, InvalidToken) as exc:
        raise AppError("invalid_api_key", failure_detail(exc), 401) from exc
    problem = scope_problem(key, "v1", "/v1")
    if problem is not None:
        raise problem
    return user, key, KeyCredential(key.hash)


async def gate(scope: dict[str, Any]) -> AppError | None:
    """The body gate of /v1 (agentsite.core.bodygate): the caller resolved from the headers alone, before a byte
    of the body is read, and left in the scope for the view; the AppError that refuses it otherwise."""
    request = ASGIRequest(scope, io.BytesIO())
    try:
        scope[CALLER_SCOPE_KEY] = await _resolve_caller(request)
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


def _parse(request: HttpRequest, schema: type[BaseModel], items: str) -> Any:
    # Its AppErrors (415, 400) leave in the OpenAI shape too.
    return validate_body(parsed_body(request, items=items, embeddings=schema is EmbeddingRequest), schema)


def validate_body(body: dict[str, Any], schema: type[BaseModel]) -> Any:
    """A JSON object body (from compat.limits.parsed_body) as the request model; AppError 400 naming the field it
    breaks."""
    try:
        return schema.model_validate(body)
    except ValidationError as exc:
        path, error = _telling_error(exc)
        param = ".".join(str(part) for part in path) or None
        message = f"{param}: {error['msg']}" if param else error["msg"]
        raise AppError("invalid_value", message, 400, {param: [error["msg"]]} if param else {}) from exc


def _telling_error(exc: ValidationError) -> tuple[tuple[Any, ...], Any]:
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


def _openai_view(handler: Handler, methods: tuple[str, ...] = ("POST",)) -> Handler:
    """An async view whose every error leaves in the OpenAI shape."""

    @csrf_exempt
    async def view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method not in methods:
            response = openai_error_response(AppError("method_not_allowed", f"Use {' or '.join(methods)}.", 405))
            response["Allow"] = ", ".join(methods)
            return response
        try:
            return await handler(request, *args, **kwargs)
        except AppError as exc:
            return openai_error_response(exc)
        except Exception:  # a boundary: a 500 in the OpenAI shape, logged
            logger.exception("Unhandled error on %s", request.path)
            return openai_error_response(AppError("internal_error", "The server failed; the error was logged.", 500))

    return view


async def _models(request: HttpRequest) -> HttpResponse:
    # What the caller may use: refused as the other /v1 paths refuse (compat_auth, a dead key, a key without
    # the v1 scope); a known caller also sees their own models (their workflows).
    user, _ = await _caller(request)
    return JsonResponse(await engine.model_list(await aget_settings(), user))


async def _model(request: HttpRequest, model_id: str) -> HttpResponse:
    """One model of the list (`models.retrieve`): its ids hold slashes (`<connection>/<model>`)."""
    user, _ = await _caller(request)
    listed = await engine.model_list(await aget_settings(), user)
    card = next((card for card in listed["data"] if card["id"] == model_id), None)
    if card is None:
        raise AppError("model_not_found", f"The model {model_id!r} does not exist; GET /v1/models lists the "
                       "models.", 404)
    return JsonResponse(card)


async def _chat_completions(request: HttpRequest) -> HttpResponse:
    user, credential = await _caller(request)
    raw = parsed_body(request, items="messages")
    body: ChatCompletionRequest = validate_body(raw, ChatCompletionRequest)
    # Fields the request model does not know: sent as they came to a passthrough connection, else a 400.
    unknown = {name: value for name, value in raw.items() if name not in ChatCompletionRequest.model_fields}
    caller = Caller.with_key(getattr(user, "pk", None), getattr(request, "api_key", None), "v1")
    completion = engine.Completion(body, settings=await aget_settings(), user=user, caller=caller, unknown=unknown)
    if body.stream:
        stream = await completion.chunks()
        if credential is not None:  # the stream ends at its next event once the token or key is revoked
            stream = revocable(stream, None, openai_error_event, credential=credential)
        response: HttpResponse = sse_response(stream)
    else:
        response = JsonResponse(await completion.result())
    for name, value in completion.headers().items():
        response[name] = value
    return response


async def _embeddings(request: HttpRequest) -> HttpResponse:
    await _caller(request)
    return JsonResponse(engine.embeddings(_parse(request, EmbeddingRequest, "input")))


models = _openai_view(_models, methods=("GET",))
model = _openai_view(_model, methods=("GET",))
chat_completions = _openai_view(_chat_completions)
embeddings = _openai_view(_embeddings)


def _responses_views() -> tuple[Handler, Handler]:
    from compat import responses

    return (_openai_view(responses.create), _openai_view(responses.one, methods=("GET", "DELETE")),
            _openai_view(responses.input_items_list, methods=("GET",)))


responses_create, responses_one, responses_input_items = _responses_views()


def _attach_schemas() -> None:
    # drf-spectacular documents a route through its view's `cls`: the schema-only views in compat.schema.
    from compat import messages
    from compat.schema import (
        ChatCompletionsSchema,
        CountTokensSchema,
        EmbeddingsSchema,
        MessagesSchema,
        ModelSchema,
        ModelsSchema,
        ResponseInputItemsSchema,
        ResponseSchema,
        ResponsesSchema,
    )

    for view, schema_view in ((models, ModelsSchema), (model, ModelSchema), (chat_completions, ChatCompletionsSchema),
                              (embeddings, EmbeddingsSchema), (responses_create, ResponsesSchema),
                              (responses_one, ResponseSchema), (responses_input_items, ResponseInputItemsSchema),
                              (messages.messages, MessagesSchema),
                              (messages.count_tokens, CountTokensSchema)):
        view.cls, view.initkwargs = schema_view, {}


_attach_schemas()

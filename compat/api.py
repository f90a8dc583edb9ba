"""/v1: models, chat completions and embeddings in OpenAI's wire format (a translation layer only)."""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt
from pydantic import BaseModel, ValidationError

from accounts.authentication import user_for_bearer
from accounts.selectors import config_get
from agentsite.agent.config import AgentSettings, get_settings
from agentsite.agent.types import ChatRequest, Finish, TextDelta, ToolCall, ToolCallEvent, Usage
from agentsite.errors import AppError
from agentsite.validation import json_object_body
from compat import translate
from compat.errors import OpenAIError
from compat.schemas import ChatCompletionRequest, EmbeddingRequest

logger = logging.getLogger(__name__)

AGENT_MODEL = "agent"
EMBEDDING_MODEL = "hash-256"
MODEL_CREATED = 1767225600  # 2026-01-01: a fixed date, so the model list is stable between calls


def _caller(request: HttpRequest) -> Any:
    """The dashboard user behind the API key, or None; in `token` mode a valid JWT is required."""
    user = user_for_bearer(request.headers.get("Authorization"))
    if config_get().compat_auth == "token" and user is None:
        raise OpenAIError(401, "This server requires a dashboard token as the API key (compat_auth is 'token').",
                          code="invalid_api_key")
    return user


def _model_ids(settings: AgentSettings) -> list[str]:
    from agentsite.agent.providers import default_model

    return [settings.model or default_model(settings.provider), AGENT_MODEL, EMBEDDING_MODEL]


def _parse(request: HttpRequest, schema: type[BaseModel]) -> Any:
    body = json_object_body(request)  # its AppErrors (415, 400) leave in the OpenAI shape via _openai_view
    try:
        json.dumps(body, ensure_ascii=False).encode()
    except UnicodeEncodeError as exc:  # a lone surrogate escape (\ud800): no upstream could encode it
        raise OpenAIError(400, "The body holds text that is not valid Unicode (a lone surrogate).") from exc
    try:
        return schema.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(part) for part in first["loc"]) or None
        raise OpenAIError(400, f"{param}: {first['msg']}" if param else first["msg"], param=param,
                          code="invalid_value") from exc


def _openai_view(handler):
    """Run an async handler; every error leaves in the OpenAI shape."""

    @csrf_exempt
    async def view(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        allowed = getattr(handler, "methods", ("POST",))
        if request.method not in allowed:
            response = OpenAIError(405, f"Use {' or '.join(allowed)}.", code="method_not_allowed").response()
            response["Allow"] = ", ".join(allowed)
            return response
        try:
            return await handler(request, *args, **kwargs)
        except OpenAIError as exc:
            return exc.response()
        except AppError as exc:
            return OpenAIError.from_app_error(exc).response()
        except Exception:  # boundary: a 500 in the OpenAI shape, logged
            logger.exception("Unhandled error on %s", request.path)
            return OpenAIError(500, "The server failed; the error was logged.", code="internal_error").response()

    return view


async def _models(request: HttpRequest) -> HttpResponse:
    # Public whatever compat_auth says (API.md); a token will only add the caller's workflow models.
    settings = await sync_to_async(get_settings)()
    data = [{"id": model_id, "object": "model", "created": MODEL_CREATED, "owned_by": "agentsite"}
            for model_id in _model_ids(settings)]
    return JsonResponse({"object": "list", "data": data})


_models.methods = ("GET",)
models = _openai_view(_models)


async def _chat_completions(request: HttpRequest) -> HttpResponse:
    user = await sync_to_async(_caller)(request)
    body: ChatCompletionRequest = _parse(request, ChatCompletionRequest)
    settings = await sync_to_async(get_settings)()
    provider_model = _model_ids(settings)[0]
    if body.model not in (provider_model, AGENT_MODEL):
        raise OpenAIError(404, f"The model {body.model!r} does not exist; GET /v1/models lists the models.",
                          param="model", code="model_not_found")
    cid = translate.completion_id()
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    if body.model == AGENT_MODEL:
        messages = translate.to_messages(body)
        overrides = {key: value for key, value in (("temperature", body.temperature),
                     ("max_tokens", body.max_completion_tokens or body.max_tokens)) if value is not None}
        agent_settings = settings.with_overrides(**overrides) if overrides else settings
        events = _agent_events(messages, user, agent_settings)
    else:
        from agentsite.agent.providers import get_provider

        provider = get_provider(settings)
        chat_request = translate.to_chat_request(body, provider_model)
        if not body.stream:  # a plain JSON request upstream: cheaper than folding a stream
            reply = await provider.complete(chat_request)
            return JsonResponse(translate.completion_object(
                cid=cid, model=body.model, text=reply.text, tool_calls=reply.tool_calls,
                finish_reason=translate.finish_reason_out(reply.finish_reason), usage=reply.usage.as_dict()))
        events = _provider_events(provider, chat_request)
    if body.stream:
        # Wait for the first event before answering 200, so an upstream that refuses the connection
        # is a proper 502 the SDK can see, not an error chunk after a success status.
        events = await _primed(events)
        return _sse_response(_chunks(events, cid=cid, model=body.model, include_usage=include_usage))
    return JsonResponse(await _complete(events, cid=cid, model=body.model))


chat_completions = _openai_view(_chat_completions)


async def _primed(events: AsyncIterator[tuple[str, Any]]) -> AsyncIterator[tuple[str, Any]]:
    try:
        first = await anext(events)
    except StopAsyncIteration:
        first = None

    async def chained() -> AsyncIterator[tuple[str, Any]]:
        if first is not None:
            yield first
        async for item in events:
            yield item

    return chained()


async def _provider_events(provider, chat_request: ChatRequest) -> AsyncIterator[tuple[str, Any]]:
    """The provider's stream as (kind, value) pairs: text, tool_call, usage, finish."""
    async for event in provider.stream(chat_request):
        if isinstance(event, TextDelta):
            yield "text", event.text
        elif isinstance(event, ToolCallEvent):
            yield "tool_call", event.call
        elif isinstance(event, Usage):
            yield "usage", event.as_dict()
        elif isinstance(event, Finish):
            yield "finish", event.reason


async def _agent_events(messages, user, agent_settings: AgentSettings) -> AsyncIterator[tuple[str, Any]]:
    """The agent loop's events in the same pairs; its own tool calls stay inside the server."""
    from agentsite.agent.loop import run_agent

    # Tools act on the host (fetch, screenshot, MCP servers): only an identified caller gets them.
    user_id = getattr(user, "pk", None)
    async for event in run_agent(messages=messages, user_id=user_id, settings=agent_settings,
                                 use_tools=user_id is not None):
        if event.type == "delta":
            yield "text", event.data.get("content", "")
        elif event.type == "done":
            yield "usage", event.data.get("usage") or {}
            yield "finish", event.data.get("finish_reason") or "stop"
        elif event.type == "error":
            raise AppError(event.data.get("code", "upstream_error"), event.data.get("message", ""), 502)


async def _complete(events: AsyncIterator[tuple[str, Any]], *, cid: str, model: str) -> dict[str, Any]:
    text: list[str] = []
    calls: list[ToolCall] = []
    usage: dict[str, int] = {}
    finish = "stop"
    async for kind, value in events:
        if kind == "text":
            text.append(value)
        elif kind == "tool_call":
            calls.append(value)
        elif kind == "usage":
            usage = value
        elif kind == "finish":
            finish = value
    return translate.completion_object(cid=cid, model=model, text="".join(text), tool_calls=calls,
                                       finish_reason=translate.finish_reason_out(finish), usage=_usage(usage))


def _usage(usage: dict[str, int]) -> dict[str, int]:
    prompt, completion = int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _data(obj: dict[str, Any]) -> bytes:
    # ensure_ascii: text from a model or tool may hold a lone surrogate, which UTF-8 cannot encode.
    return f"data: {json.dumps(obj)}\n\n".encode()


async def _chunks(events: AsyncIterator[tuple[str, Any]], *, cid: str, model: str,
                  include_usage: bool) -> AsyncIterator[bytes]:
    """chat.completion.chunk lines, then [DONE]. A client hang-up cancels this and, with it, the upstream."""
    created = int(time.time())
    yield _data(translate.chunk_object(cid=cid, created=created, model=model,
                                       delta={"role": "assistant", "content": ""}))
    usage: dict[str, int] = {}
    finish = "stop"
    tool_index = 0
    try:
        async for kind, value in events:
            if kind == "text" and value:
                yield _data(translate.chunk_object(cid=cid, created=created, model=model, delta={"content": value}))
            elif kind == "tool_call":
                delta = {"tool_calls": [translate.tool_call_out(value, index=tool_index)]}
                tool_index += 1
                yield _data(translate.chunk_object(cid=cid, created=created, model=model, delta=delta))
            elif kind == "usage":
                usage = value
            elif kind == "finish":
                finish = value
    except AppError as exc:
        yield OpenAIError(exc.status, exc.message, code=exc.code).sse()
        return
    except OpenAIError as exc:
        yield exc.sse()
        return
    except Exception:  # boundary: a started stream must end with an error chunk, never hang
        logger.exception("The /v1 stream failed")
        yield OpenAIError(500, "The server failed; the error was logged.", code="internal_error").sse()
        return
    yield _data(translate.chunk_object(cid=cid, created=created, model=model, delta={},
                                       finish_reason=translate.finish_reason_out(finish)))
    if include_usage:
        yield _data(translate.chunk_object(cid=cid, created=created, model=model, usage=_usage(usage)))
    yield b"data: [DONE]\n\n"


def _sse_response(stream: AsyncIterator[bytes]) -> StreamingHttpResponse:
    response = StreamingHttpResponse(stream, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


async def _embeddings(request: HttpRequest) -> HttpResponse:
    await sync_to_async(_caller)(request)
    body: EmbeddingRequest = _parse(request, EmbeddingRequest)
    if body.model != EMBEDDING_MODEL:
        raise OpenAIError(404, f"The embedding model {body.model!r} does not exist; use {EMBEDDING_MODEL!r}.",
                          param="model", code="model_not_found")
    texts = [body.input] if isinstance(body.input, str) else list(body.input)
    if not texts or len(texts) > 2048:
        raise OpenAIError(400, "input must hold 1 to 2048 strings.", param="input")
    from knowledge.embedding import embed_many, tokenize

    vectors = embed_many(texts)
    data = []
    for index, vector in enumerate(vectors):
        embedding: Any = (base64.b64encode(vector.astype("<f4").tobytes()).decode()
                          if body.encoding_format == "base64" else [float(x) for x in vector])
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    tokens = sum(len(tokenize(text)) for text in texts)
    return JsonResponse({"object": "list", "data": data, "model": EMBEDDING_MODEL,
                         "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})


embeddings = _openai_view(_embeddings)


def _document(view, schema_view) -> None:
    view.cls, view.initkwargs = schema_view, {}


def _attach_schemas() -> None:
    from compat.schema import ChatCompletionsSchema, EmbeddingsSchema, ModelsSchema

    _document(models, ModelsSchema)
    _document(chat_completions, ChatCompletionsSchema)
    _document(embeddings, EmbeddingsSchema)


_attach_schemas()

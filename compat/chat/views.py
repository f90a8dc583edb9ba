"""/v1/models, /v1/chat/completions and /v1/embeddings: thin views over compat.run in OpenAI's dialect."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from accounts.authentication import revocable
from agentsite.agent import agents, modelaccess
from agentsite.agent.config import AgentSettings, aget_settings
from agentsite.agent.model_sources import model_sources
from agentsite.agent.usage import Caller
from agentsite.core.dbcall import db
from agentsite.core.errors import AppError
from agentsite.core.sse import sse_response
from compat.chat import render
from compat.chat.translate import chat_request
from compat.chat.wire import ChatCompletionRequest, EmbeddingRequest, ModelCard, ModelList
from compat.http import door_view, request_caller, validate_body
from compat.limits import parsed_body
from compat.run import EMBEDDING_MODEL, MODEL_CREATED, Run, model_ids

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser


async def all_model_ids(settings: AgentSettings, user: AbstractBaseUser | None) -> list[str]:
    """The models, with those that facets answer for this caller (their workflows) when they are known."""
    user_id = getattr(user, "pk", None)
    extra = [name for source in model_sources() for name in await source.list_models(user_id)]
    named = await db(agents.names_now, user)  # agent:<slug>: those the caller may use
    return [*model_ids(settings, named), *extra]


async def model_list(settings: AgentSettings, user: AbstractBaseUser | None,
                     caller: Caller | None = None) -> dict[str, Any]:
    """The models the caller may use (those their groups allow, agentsite.agent.modelaccess)."""
    ids = await modelaccess.allowed_names(caller, await all_model_ids(settings, user))
    data = [ModelCard(id=model_id, created=MODEL_CREATED, owned_by="agentsite") for model_id in ids]
    return ModelList(data=data).model_dump()


async def _models(request: HttpRequest) -> HttpResponse:
    # What the caller may use: refused as the other /v1 paths refuse (compat_auth, a dead key, a key without
    # the v1 scope); a known caller also sees their own models (their workflows), and only those their groups
    # allow.
    caller = await request_caller(request)
    return JsonResponse(await model_list(await aget_settings(), caller.user, caller.usage("v1")))


async def _model(request: HttpRequest, model_id: str) -> HttpResponse:
    """One model of the list (`models.retrieve`): its ids hold slashes (`<connection>/<model>`). One the
    caller's groups do not allow is 403 `model_not_allowed`, as every door answers a request naming it. An agent
    (`agent`, `agent:<slug>`, a pinned `agent:<slug>@<n>`) is answered as the doors resolve it: 404
    `model_not_found` when the caller may not use it or the version does not exist, then the groups' check by
    the names a group's list may allow it by."""
    caller = await request_caller(request)
    if agents.is_agent_model(model_id):
        await agents.aresolve(caller.user, model_id)
        await modelaccess.require(caller.usage("v1"), agents.access_names(model_id))
        return JsonResponse(ModelCard(id=model_id, created=MODEL_CREATED, owned_by="agentsite").model_dump())
    if model_id not in await all_model_ids(await aget_settings(), caller.user):
        raise AppError("model_not_found", f"The model {model_id!r} does not exist; GET /v1/models lists the "
                       "models.", 404)
    await modelaccess.require(caller.usage("v1"), (model_id,))
    return JsonResponse(ModelCard(id=model_id, created=MODEL_CREATED, owned_by="agentsite").model_dump())


async def _chat_completions(request: HttpRequest) -> HttpResponse:
    caller = await request_caller(request)
    raw = parsed_body(request, items="messages")
    body: ChatCompletionRequest = validate_body(raw, ChatCompletionRequest)
    # Fields the request model does not know: sent as they came to a passthrough connection, else a 400.
    unknown = {name: value for name, value in raw.items() if name not in ChatCompletionRequest.model_fields}
    run = Run(chat_request(body, unknown), settings=await aget_settings(), user=caller.user,
              caller=caller.usage("v1"))
    cid = render.completion_id()
    if body.stream:
        first, batches = await run.opened()
        options = body.stream_options
        stream = render.chunks(first, batches, cid=cid, model=run.model,
                               include_usage=bool(options and options.include_usage))
        if caller.credential is not None:  # the stream ends at its next event once the token or key is revoked
            stream = revocable(stream, None, render.error_event, credential=caller.credential)
        response: HttpResponse = sse_response(stream)
    else:
        reply = await run.reply()
        response = JsonResponse(render.completion_object(
            cid=cid, model=run.model, text=reply.text, tool_calls=reply.tool_calls,
            finish_reason=render.finish_reason_out(reply.finish_reason), usage=reply.usage.as_dict(),
            logprobs=reply.logprobs))
    for name, value in run.headers().items():
        response[name] = value
    return response


async def _embeddings(request: HttpRequest) -> HttpResponse:
    caller = await request_caller(request)
    body = validate_body(parsed_body(request, items="input", embeddings=True), EmbeddingRequest)
    if body.model == EMBEDDING_MODEL:  # another name is 404 model_not_found (embeddings)
        await modelaccess.require(caller.usage("v1"), (body.model,))
    return JsonResponse(embeddings(body))


def embeddings(body: EmbeddingRequest) -> dict[str, Any]:
    """The knowledge base's own vectors for the inputs (1 to 2048 of them: EmbeddingRequest enforces it). Raises
    AppError 404 `model_not_found`."""
    # Start-up cost: the embedding module loads numpy, which only this route needs.
    from knowledge.embedding import embed_many, tokenize

    if body.model != EMBEDDING_MODEL:
        raise AppError("model_not_found", f"The embedding model {body.model!r} does not exist; use "
                       f"{EMBEDDING_MODEL!r}.", 404)
    texts = [body.input] if isinstance(body.input, str) else list(body.input)
    data = []
    for index, vector in enumerate(embed_many(texts)):
        embedding: Any = (base64.b64encode(vector.astype("<f4").tobytes()).decode()
                          if body.encoding_format == "base64" else [float(x) for x in vector])
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    tokens = sum(len(tokenize(text)) for text in texts)
    return {"object": "list", "data": data, "model": EMBEDDING_MODEL,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


models = door_view(_models, render.error_response, methods=("GET",))
model = door_view(_model, render.error_response, methods=("GET",))
chat_completions = door_view(_chat_completions, render.error_response)
embeddings_view = door_view(_embeddings, render.error_response)

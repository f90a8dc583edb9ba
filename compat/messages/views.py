"""POST /v1/messages and /v1/messages/count_tokens: thin views over the Messages run and its renderer, every
error in Anthropic's shape (`{"type": "error", "error": {"type", "message"}}`), so the anthropic SDK raises the
matching class."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from accounts.authentication import revocable
from agentsite.agent.config import aget_settings
from agentsite.core.sse import sse_response
from compat.http import door_view, request_caller
from compat.messages.render import (
    error_event,
    error_response,
    message_events,
    message_id,
    message_object,
    stop_sequence_of,
)
from compat.messages.translate import MessagesRun, estimate_input_tokens, native_fields, to_chat_request
from compat.messages.wire import Conversation, CountTokensRequest, MessagesRequest, parse


async def _run(request: HttpRequest, schema: type[Conversation]) -> tuple[MessagesRun, Any, Any]:
    """(run, credential, body): the caller authenticated first (401/403 before any 400), then the body."""
    caller = await request_caller(request)
    body, unknown = parse(request, schema)
    chat_request = to_chat_request(body)
    chat_request.passthrough = unknown
    run = MessagesRun(chat_request, settings=await aget_settings(), user=caller.user, caller=caller.usage("v1"),
                      native=native_fields(body))  # 404 model_not_found; 400 a field it cannot carry
    return run, caller.credential, body


async def _messages(request: HttpRequest) -> HttpResponse:
    run, credential, body = await _run(request, MessagesRequest)
    mid = message_id()
    if body.stream:
        first, batches = await run.opened()  # an upstream that refuses: an error status, not an event
        stream = message_events(first, batches, mid=mid, model=run.model, stops=body.stop_sequences)
        if credential is not None:  # the stream ends at its next event once the token or key is revoked
            stream = revocable(stream, None, error_event, credential=credential)
        response: HttpResponse = sse_response(stream)
    else:
        reply = await run.reply()
        response = JsonResponse(message_object(
            mid=mid, model=run.model, text=reply.text, calls=reply.tool_calls, finish=reply.finish_reason,
            usage=reply.usage, stop_sequence=stop_sequence_of(reply.stop_sequence, body.stop_sequences)))
    for name, value in run.headers().items():
        response[name] = value
    return response


async def _count_tokens(request: HttpRequest) -> HttpResponse:
    run, _, _ = await _run(request, CountTokensRequest)  # the same checks as a message
    await run.allow()  # and the same model access: a model the caller may not use is not counted for them
    return JsonResponse({"input_tokens": estimate_input_tokens(run.request)})


messages = door_view(_messages, error_response)
count_tokens = door_view(_count_tokens, error_response)

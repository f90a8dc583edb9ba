"""POST /v1/responses, GET and DELETE /v1/responses/<id>, GET /v1/responses/<id>/input_items: thin views over
the Responses run, its renderer and its store, in OpenAI's error shape."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from accounts.authentication import credential_problem
from agentsite.agent.config import aget_settings
from agentsite.core.dbcall import db
from agentsite.core.errors import AppError
from agentsite.core.sse import sse_response
from compat.chat.render import error_response
from compat.http import door_view, request_caller
from compat.responses import render, store
from compat.responses.run import ResponseRun, status_of
from compat.responses.wire import parse_request


async def _create(request: HttpRequest) -> HttpResponse:
    caller = await request_caller(request)
    body, unknown = parse_request(request)
    history = await store.history(caller.user, body.previous_response_id) if body.previous_response_id else []
    run = ResponseRun(body, history, settings=await aget_settings(), user=caller.user, caller=caller.usage("v1"),
                      unknown=unknown)
    if body.stream:
        # The stream ends at its next event, with response.failed, once the token or key is revoked.
        credential = caller.credential
        stands = (lambda: credential_problem(credential)) if credential is not None else None
        first, batches = await run.opened()  # an upstream that refuses: an error status, not an event
        response: HttpResponse = sse_response(render.events(run, first, batches, stands))
    else:
        reply = await run.reply()
        items = render.output_items(reply)
        if body.store:
            await run.store(run.response(status="completed", output=items, usage=reply.usage,
                                         finish=reply.finish_reason))
        # The bytes JsonResponse(run.response(...)) would send, from the run's encoded fixed fields.
        response = HttpResponse(run.response_json(status=status_of("completed", reply.finish_reason)[0],
                                                  output=[json.dumps(item).encode() for item in items],
                                                  usage=reply.usage), content_type="application/json")
    for name, value in run.headers().items():
        response[name] = value
    return response


async def _one(request: HttpRequest, pk: str) -> HttpResponse:
    response_id = pk
    user = (await request_caller(request)).user
    if request.method == "DELETE":
        deleted = await db(lambda: store.owned(user, response_id).delete()[0])
        if not deleted:
            raise store.not_found()
        return JsonResponse({"id": response_id, "object": "response.deleted", "deleted": True})
    stored = await db(lambda: store.owned(user, response_id).values_list("response", flat=True).first())
    if stored is None:
        raise store.not_found()
    return JsonResponse(stored)


async def _input_items(request: HttpRequest, pk: str) -> HttpResponse:
    """GET /v1/responses/{id}/input_items: the items the stored response answered (its conversation before its
    output), OpenAI's list page: `order` (`desc`, the default, or `asc`), `limit` (1-100, default 20), `after`
    (an item id). An item without an id of its own (a client's input message) gets `item_<position>`."""
    user = (await request_caller(request)).user
    stored = await db(lambda: store.owned(user, pk).values_list("history", "response").first())
    if stored is None:
        raise store.not_found()
    history, response = stored
    items = [_input_item(item, index) for index, item in enumerate(history[:len(history) - len(response["output"])])]
    order, limit, after = _page_params(request)
    if order == "desc":
        items.reverse()
    if after:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise AppError("invalid_value", f"after: no input item {after!r} in this response.", 400,
                           {"after": ["not found"]})
        items = items[ids.index(after) + 1:]
    page = items[:limit]
    return JsonResponse({"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                         "last_id": page[-1]["id"] if page else None, "has_more": len(items) > limit})


def _page_params(request: HttpRequest) -> tuple[str, int, str]:
    order = request.GET.get("order", "desc")
    if order not in ("asc", "desc"):
        raise AppError("invalid_value", "order: asc or desc.", 400, {"order": ["asc or desc"]})
    raw = request.GET.get("limit", "20")
    if not raw.isdigit() or not 1 <= int(raw) <= 100:
        raise AppError("invalid_value", "limit: an integer from 1 to 100.", 400, {"limit": ["1 to 100"]})
    return order, int(raw), request.GET.get("after", "")


def _input_item(item: dict[str, Any], index: int) -> dict[str, Any]:
    """A stored item in the list's shape: an id, and a message's string content as one text part."""
    out = {"id": f"item_{index:04d}", **item} if not item.get("id") else dict(item)
    if out.get("type", "message") == "message":
        out["type"] = "message"
        if isinstance(out.get("content"), str):
            kind = "output_text" if out.get("role") == "assistant" else "input_text"
            out["content"] = [{"type": kind, "text": out["content"]}]
    return out


create = door_view(_create, error_response)
one = door_view(_one, error_response, methods=("GET", "DELETE"))
input_items = door_view(_input_items, error_response, methods=("GET",))

"""POST /v1/toy/say: the caller, the body, the run, the reply or its stream; every error in the toy shape."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse

from agentsite.agent.config import aget_settings
from agentsite.core.sse import sse_response
from compat.http import door_view, request_caller
from compat.run import Run
from compat.stream import drive
from tests.compat.toydoor.render import ToyRenderer, error_response, reply_object
from tests.compat.toydoor.translate import to_chat_request
from tests.compat.toydoor.wire import parse


async def _say(request: HttpRequest) -> HttpResponse:
    caller = await request_caller(request)  # 401 before the body is looked at
    body = parse(request)
    run = Run(to_chat_request(body), settings=await aget_settings(), user=caller.user, caller=caller.usage("v1"))
    if body.stream:
        first, batches = await run.opened()
        return sse_response(drive(ToyRenderer(), first, batches))
    return JsonResponse(reply_object(run.model, await run.reply()))


say = door_view(_say, error_response)

"""The toy door's replies: a whole reply as {"toy": "reply", model, text, finish}, a stream as `piece` events and
one `done`, and every error as {"toy_error": {code, message}} (a response, or the event that ends a stream)."""

from __future__ import annotations

from typing import Any

from django.http import JsonResponse

from agentsite.agent.types import Completion, Finish, StreamEvent, TextDelta
from agentsite.core.errors import AppError
from agentsite.core.sse import sse_event
from compat.stream import Renderer


def reply_object(model: str, reply: Completion) -> dict[str, Any]:
    return {"toy": "reply", "model": model, "text": reply.text, "finish": reply.finish_reason}


class ToyRenderer(Renderer):
    """A `piece` event per text delta, `done` with the finish reason at the close."""

    where = "/v1/toy/say"

    def __init__(self) -> None:
        super().__init__()
        self.finish = "stop"

    def render(self, batch: list[StreamEvent]) -> None:
        for event in batch:
            if isinstance(event, TextDelta) and event.text:
                self.out.append(sse_event({"text": event.text}, "piece"))
            elif isinstance(event, Finish):
                self.finish = event.reason

    async def close(self) -> None:
        self.out.append(sse_event({"finish": self.finish}, "done"))

    def failed(self, exc: AppError) -> bytes:
        return error_event(exc)


def _error(exc: AppError) -> dict[str, Any]:
    return error_body(exc.code, exc.message, exc.status)


def error_body(code: str, message: str, status: int, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"toy_error": {"code": code, "message": message}}


def error_response(exc: AppError) -> JsonResponse:
    return JsonResponse(_error(exc), status=exc.status)


def error_event(exc: AppError) -> bytes:
    return sse_event(_error(exc), "toy_error")

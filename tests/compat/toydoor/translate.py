"""The toy request as the runtime's ChatRequest: one user message to the model it names."""

from __future__ import annotations

from agentsite.agent.types import ChatRequest, Message, ModelSettings
from tests.compat.toydoor.wire import ToySayRequest


def to_chat_request(body: ToySayRequest) -> ChatRequest:
    return ChatRequest([Message("user", body.say)], settings=ModelSettings(model=body.model))

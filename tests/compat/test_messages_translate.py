"""compat/messages/ without a server: the Messages request in the runtime's types, and the stream's bytes."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentsite.agent.types import Finish, TextDelta, ToolCall, ToolCallEvent, Usage
from agentsite.core.errors import AppError
from compat.messages.render import message_events
from compat.messages.translate import to_chat_request
from compat.messages.wire import MessagesRequest


def _request(**fields) -> MessagesRequest:
    return MessagesRequest.model_validate({"model": "m", "max_tokens": 5, **fields})


def test_a_tool_round_trip_becomes_assistant_calls_then_tool_messages_then_the_user_text():
    request = to_chat_request(_request(system=[{"type": "text", "text": "S"}], tool_choice={"type": "any"}, messages=[
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "r", "is_error": True},
                                     {"type": "text", "text": "and?"}]}]))
    roles = [message.role for message in request.messages]
    assert roles == ["system", "user", "assistant", "tool", "user"]
    assert request.messages[2].tool_calls == [ToolCall("t1", "f", {"a": 1})]
    tool = request.messages[3]
    assert (tool.tool_call_id, tool.name, tool.text, tool.is_error) == ("t1", "f", "r", True)
    assert request.tool_choice == "required" and request.settings.max_tokens == 5


@pytest.mark.parametrize(("messages", "named"), [
    ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": "r"}]}], "messages.0"),
    ([{"role": "user", "content": "q"},
      {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
      {"role": "user", "content": "no result"}], "messages.2"),
    ([{"role": "user", "content": [{"type": "text", "text": "x", "input": {}}]}], "messages.0.content.0.input"),
    ([{"role": "user", "content": [{"type": "image"}]}], "messages.0.content.0.source"),
    ([{"role": "user", "content": "x" * 32_001}], "messages.0.content"),
])
def test_a_bad_conversation_is_a_400_naming_the_place(messages, named):
    with pytest.raises(AppError) as caught:
        to_chat_request(_request(messages=messages))
    assert caught.value.status == 400 and caught.value.message.startswith(named)


def test_the_stream_events_are_those_the_anthropic_sdk_reads():
    async def batches():
        yield [TextDelta("b"), ToolCallEvent(ToolCall("t", "f", {"x": 1}))]
        yield [Usage(3, 4), Finish("tool_calls")]

    async def collect():
        stream = message_events([TextDelta('a "q"\n')], batches(), mid="msg_1", model="m")
        return b"".join([piece async for piece in stream])

    frames = [frame for frame in asyncio.run(collect()).decode().split("\n\n") if frame]
    events = [(frame.split("\n")[0].removeprefix("event: "), json.loads(frame.split("\n")[1][6:]))
              for frame in frames]
    assert all(name == data["type"] for name, data in events)
    assert [name for name, _ in events] == ["message_start", "ping", "content_block_start", "content_block_delta",
                                            "content_block_delta", "content_block_stop", "content_block_start",
                                            "content_block_delta", "content_block_stop", "message_delta",
                                            "message_stop"]
    assert events[3][1] == {"type": "content_block_delta", "index": 0,
                            "delta": {"type": "text_delta", "text": 'a "q"\n'}}
    assert events[6][1]["index"] == 1 and events[6][1]["content_block"]["type"] == "tool_use"
    assert json.loads(events[7][1]["delta"]["partial_json"]) == {"x": 1}
    assert events[9][1]["delta"]["stop_reason"] == "tool_use"
    assert events[9][1]["usage"] == {"input_tokens": 3, "output_tokens": 4}


@pytest.mark.parametrize(("said", "asked", "expected"), [
    ("END", ["STOP", "END"], ("stop_sequence", "END")),
    ("OTHER", ["END"], ("end_turn", None)),  # a sequence the request did not ask for is not named
    (None, ["END"], ("end_turn", None)),  # the source did not say (OpenAI's own API, the agent, a workflow)
    ("END", None, ("end_turn", None)),
])
def test_message_delta_names_only_a_stop_sequence_the_request_asked_for(said, asked, expected):
    async def batches():
        yield [Usage(1, 1), Finish("stop", said)]

    async def collect():
        stream = message_events([TextDelta("x")], batches(), mid="msg_1", model="m", stops=asked)
        return b"".join([piece async for piece in stream])

    frames = [json.loads(frame.split("\n")[1][6:]) for frame in asyncio.run(collect()).decode().split("\n\n")
              if frame]
    delta = next(frame for frame in frames if frame["type"] == "message_delta")["delta"]
    assert (delta["stop_reason"], delta["stop_sequence"]) == expected

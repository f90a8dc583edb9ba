"""The /v1 stream's text chunks come from a per-stream template: byte for byte what encoding each chunk object
gives, whatever the text holds."""

from __future__ import annotations

import json
import re

import pytest

from agentsite.agent.config import AgentSettings
from agentsite.agent.types import Finish, TextDelta, ToolCall, ToolCallEvent, Usage
from agentsite.agent.usage import Caller
from agentsite.core.sse import json_text, sse_event
from compat.chat import render as translate
from compat.chat.render import chunks as _chunks
from compat.messages.render import message_events
from compat.responses.render import call_item, message_item
from compat.responses.render import events as response_events
from compat.responses.run import ResponseRun
from compat.responses.wire import ResponseRequest

TEXTS = ["plain", 'quotes " and \\ backslashes', "line\nbreaks\tand tabs", "ünïcödé 漢字 🙂", "\ud800 lone",
         "\x00 nul", "</script>", "100% %s %d %%", ""]


async def _batches(size: int):
    events = [*(TextDelta(text) for text in TEXTS), Finish("stop")]
    for start in range(0, len(events), size):
        yield events[start:start + size]


async def _pieces(size: int, **options) -> list[bytes]:
    """What _chunks writes for the events in batches of `size`, given as Run.opened() gives them."""
    batches = _batches(size)
    first = await anext(batches)
    return [piece async for piece in _chunks(first, batches, **options)]


def _sse_events(body: bytes) -> list[bytes]:
    return [event + b"\n\n" for event in body.split(b"\n\n") if event]


async def test_text_chunks_are_byte_for_byte_the_encoded_chunk_objects():
    pieces = await _pieces(1, cid="chatcmpl-1", model='a "model"', include_usage=False)
    events = _sse_events(b"".join(pieces))
    created = json.loads(events[0][len(b"data: "):])["created"]
    for text, got in zip([text for text in TEXTS if text], events[1:len(TEXTS)], strict=True):
        expected = sse_event(translate.chunk_object(cid="chatcmpl-1", created=created, model='a "model"',
                                                    delta={"content": text}))
        assert got == expected
        assert json.loads(got[len(b"data: "):])["choices"][0]["delta"]["content"] == text


async def test_events_ready_together_leave_as_one_piece_with_the_same_bytes():
    one_by_one = await _pieces(1, cid="c", model="m", include_usage=True)
    together = await _pieces(3, cid="c", model="m", include_usage=True)
    # A piece per batch that holds text (the role chunk goes with the first), then the finish, usage and [DONE].
    # A batch with no text to send (the empty text alone, the Finish) adds no piece.
    texts = [text for text in TEXTS if text]
    batches_with_text = len({index // 3 for index, text in enumerate(TEXTS) if text})
    assert len(one_by_one) == len(texts) + 1 and len(together) == batches_with_text + 1
    strip = [_created_zeroed(event) for event in _sse_events(b"".join(one_by_one))]
    assert strip == [_created_zeroed(event) for event in _sse_events(b"".join(together))]
    assert strip[-1] == b"data: [DONE]\n\n"


def test_json_text_is_byte_for_byte_json_dumps():
    for text in [*TEXTS, "\u2028\u2029", "\x7f\x1f", "\udfff\ud800\udc00"]:
        assert json_text(text) == json.dumps(text).encode()


def _run(**fields) -> ResponseRun:
    """A real run of the `agent` model (nothing is asked of it here: the events are given), store false."""
    body = ResponseRequest.model_validate({"model": "agent", "input": "hi", "store": False, **fields})
    return ResponseRun(body, [], settings=AgentSettings(), user=None, caller=Caller(None, facet="v1"))


def _objects(body: bytes) -> list[tuple[str, dict]]:
    """(event name, data) of each event."""
    out = []
    for event in _sse_events(body):
        name, data = event.split(b"\n", 1)
        assert name.startswith(b"event: ") and data.startswith(b"data: ")
        out.append((name[len(b"event: "):].decode(), json.loads(data[len(b"data: "):])))
    return out


@pytest.mark.parametrize("size", [1, 4])
async def test_responses_text_deltas_are_byte_for_byte_the_encoded_events(size):
    batches = _batches(size)
    first = await anext(batches)
    body = b"".join([piece async for piece in response_events(_run(), first, batches)])
    events = _sse_events(body)
    objects = _objects(body)
    deltas = [(raw, data) for raw, (name, data) in zip(events, objects, strict=True)
              if name == "response.output_text.delta"]
    assert [data["delta"] for _, data in deltas] == [text for text in TEXTS if text]
    for raw, data in deltas:
        kind = "response.output_text.delta"
        assert raw == sse_event({"type": kind, "item_id": data["item_id"], "output_index": 0, "content_index": 0,
                                 "delta": data["delta"], "logprobs": [],
                                 "sequence_number": data["sequence_number"]}, kind)
    assert [data["sequence_number"] for _, data in objects] == list(range(len(objects)))
    # Every event, templated or not (created and in_progress share one encoding of the response): the bytes
    # that encoding its object gives.
    assert events == [sse_event(data, name) for name, data in objects]
    assert [name for name, _ in objects[:2]] == ["response.created", "response.in_progress"]
    done = [data for name, data in objects if name == "response.output_text.done"]
    assert [entry["text"] for entry in done] == ["".join(TEXTS)]
    assert objects[-1][0] == "response.completed"
    assert objects[-1][1]["response"]["output"][0]["content"][0]["text"] == "".join(TEXTS)


async def test_every_responses_event_of_text_tools_and_a_cut_reply_is_its_encoded_object():
    """Text, a tool call, more text and a reply cut by max_output_tokens: every event (the closing ones
    templated around the whole text, encoded once) is the bytes its object encodes to."""
    call = ToolCall("call_1", "look_up", {"q": 'a "quoted" 100% query'})

    async def batches():
        yield [TextDelta("before \n the call")]
        yield [ToolCallEvent(call), TextDelta("after "), TextDelta("ünï")]
        yield [Usage(3, 4), Finish("length")]

    run = _run(instructions="be brief", max_output_tokens=9, temperature=0.5)
    stream = batches()
    body = b"".join([piece async for piece in response_events(run, await anext(stream), stream)])
    events, objects = _sse_events(body), _objects(body)
    assert events == [sse_event(data, name) for name, data in objects]
    assert [data["sequence_number"] for _, data in objects] == list(range(len(objects)))
    name, last = objects[-1]
    assert name == "response.incomplete" and last["response"]["status"] == "incomplete"
    output = last["response"]["output"]
    assert [item["type"] for item in output] == ["message", "function_call", "message"]
    assert output[1] == call_item(call)
    assert output[2] == message_item(output[2]["id"], "after ünï")
    # The closing object is the one response() builds, byte for byte.
    expected = run.response(status="completed", output=output, usage=Usage(3, 4), finish="length")
    assert last["response"] == json.loads(json.dumps(expected))
    assert last["response"]["usage"]["total_tokens"] == 7


# Requests that set each of the response object's fixed fields, for the template that encodes them.
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}}
REQUESTS = [
    {},
    {"instructions": 'say "hi" \u2028 ünï', "previous_response_id": "resp_" + "0" * 32},
    {"max_output_tokens": 9, "temperature": 0.5, "store": True},
    {"temperature": 1, "tool_choice": "required", "text": {"format": {"type": "text"}}},
    {"tools": [{"type": "function", "name": "look_up", "description": "d", "parameters": SCHEMA, "strict": True}],
     "tool_choice": {"type": "function", "name": "look_up"}},
    {"tools": [{"type": "function", "name": "f"}], "tool_choice": "none", "temperature": 0.0},
    {"text": {"format": {"type": "json_schema", "name": "n", "schema": SCHEMA, "strict": True}}},
    {"text": {"format": {"type": "json_object"}, "verbosity": "low"}},
    {"top_p": 0.5, "parallel_tool_calls": False, "metadata": {"team": 'bl"ue \u2028'}, "user": "u-42"},
    {"top_p": 1.0, "parallel_tool_calls": True, "metadata": {}},
]


@pytest.mark.parametrize("fields", REQUESTS)
def test_the_fixed_fields_template_is_the_encoded_fields(fields):
    run = ResponseRun(ResponseRequest.model_validate({"model": "fake-model", "input": "hi", **fields}), [],
                      settings=AgentSettings(provider="openai", base_url="http://127.0.0.1:9/v1", api_key="sk-x",
                                             model="fake-model"), user=None, caller=Caller(None, facet="v1"))
    assert run._fixed_head == json.dumps(run._fixed).encode()[:-1]
    assert json.loads(run._fixed_head + b"}")["model"] == "fake-model"


@pytest.mark.parametrize("status", ["in_progress", "completed", "incomplete"])
def test_a_response_object_encoded_from_its_parts_is_the_encoded_object(status):
    run = _run(instructions='say "hi"', previous_response_id="resp_" + "0" * 32)
    items = [message_item("msg_1", "one \u2028 two"), call_item(ToolCall("c", "f", {"a": [1]}))]
    for usage in (None, Usage(1, 2)):
        finish = "length" if status == "incomplete" else "stop"
        obj = run.response(status="completed" if status == "incomplete" else status, output=items, usage=usage,
                           finish=finish)
        assert obj["status"] == status
        got = run.response_json(status=status, output=[json.dumps(item).encode() for item in items], usage=usage)
        assert got == json.dumps(obj).encode()


@pytest.mark.parametrize("size", [1, 4])
async def test_messages_text_deltas_are_byte_for_byte_the_encoded_events(size):
    batches = _batches(size)
    first = await anext(batches)
    body = b"".join([piece async for piece in message_events(first, batches, mid="msg_1", model="m")])
    deltas = [(raw, data) for raw, (name, data) in zip(_sse_events(body), _objects(body), strict=True)
              if name == "content_block_delta"]
    assert [data["delta"]["text"] for _, data in deltas] == [text for text in TEXTS if text]
    for raw, data in deltas:
        assert raw == sse_event({"type": "content_block_delta", "index": data["index"],
                                 "delta": {"type": "text_delta", "text": data["delta"]["text"]}},
                                "content_block_delta")


def _created_zeroed(event: bytes) -> bytes:
    return re.sub(rb'"created": \d+', b'"created": 0', event)


@pytest.mark.parametrize(("env", "url", "expected"), [
    ({"HTTPS_PROXY": "http://proxy:3128"}, "https://api.example.com/v1", "http://proxy:3128"),
    ({"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "example.com"}, "https://api.example.com/v1", None),
    ({"HTTP_PROXY": "http://proxy:3128"}, "https://api.example.com/v1", None),
    ({"ALL_PROXY": "http://all:1"}, "http://llm.local/v1", "http://all:1"),
    ({}, "https://api.example.com/v1", None),
])
def test_the_upstream_proxy_comes_from_the_environment_as_before(monkeypatch, env, url, expected):
    from agentsite.agent.providers import http

    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "all_proxy",
                 "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    http._proxy_for.cache_clear()
    try:
        assert http._proxy_for(url) == expected
    finally:
        http._proxy_for.cache_clear()

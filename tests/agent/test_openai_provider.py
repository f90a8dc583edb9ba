"""The openai provider against the fake /chat/completions server."""

from __future__ import annotations

import asyncio
import json
import threading

from agentsite.agent.providers import OpenAIProvider, get_provider
from agentsite.agent.types import (
    ChatRequest,
    Completion,
    Finish,
    ImagePart,
    Message,
    ModelSettings,
    TextDelta,
    TextPart,
    ToolCall,
    ToolCallEvent,
    ToolSpec,
    Usage,
)
from agentsite.core.errors import AppError
from tests.agent.conftest import API_KEY
from tests.fakes.llm import Call, Raw, Text, ToolCalls

PNG = b"\x89PNG\r\n\x1a\n fake image bytes"
LOOKUP = ToolSpec("lookup", "Look a word up.", {"type": "object", "properties": {"word": {"type": "string"}}})


def hello_request(**changes) -> ChatRequest:
    return ChatRequest([Message("system", "Be brief."), Message("user", "Hello?")], **changes)


async def events_of(provider, request) -> list:
    return [event async for event in provider.stream(request)]


async def test_openai_streams_text_deltas_then_usage_then_finish(fake_openai, openai_settings):
    fake_openai.script(Text("Hello there, how are you?", pieces=["Hello", " there,", " how are you?"], usage=(9, 4)))

    events = await events_of(get_provider(openai_settings), hello_request())

    assert events == [TextDelta("Hello"), TextDelta(" there,"), TextDelta(" how are you?"), Usage(9, 4),
                      Finish("stop")]


async def test_openai_sends_the_chat_completions_wire_request(fake_openai, openai_settings):
    fake_openai.script(Text("ok"))
    request = hello_request(tools=[LOOKUP], settings=ModelSettings(temperature=0.2, max_tokens=50, stop=["END"]))

    await events_of(get_provider(openai_settings), request)

    sent = fake_openai.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {API_KEY}"
    assert sent.json() == {
        "model": "gpt-fake", "stream": True, "stream_options": {"include_usage": True},
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello?"}],
        "temperature": 0.2, "max_tokens": 50, "stop": ["END"],
        "tools": [{"type": "function", "function": {"name": "lookup", "description": "Look a word up.",
                                                    "parameters": LOOKUP.input_schema}}],
    }


async def test_openai_without_an_api_key_sends_no_authorization_header(fake_openai):
    fake_openai.script(Text("ok"))

    await events_of(OpenAIProvider(base_url=fake_openai.base_url, model="llama3"), hello_request())

    assert "authorization" not in fake_openai.requests[0].headers
    assert fake_openai.requests[0].json()["model"] == "llama3"


async def test_openai_assembles_tool_call_arguments_from_incremental_deltas(fake_openai, openai_settings):
    arguments = {"word": "serendipity", "lang": "en", "nested": {"deep": [1, 2, 3]}}
    fake_openai.script(ToolCalls([Call("lookup", arguments, id="call_a"), Call("lookup", {"word": "x"}, id="call_b")],
                                 text="Let me look."))

    events = await events_of(get_provider(openai_settings), hello_request(tools=[LOOKUP]))

    assert events == [TextDelta("Let me "), TextDelta("look."),
                      ToolCallEvent(ToolCall("call_a", "lookup", arguments)),
                      ToolCallEvent(ToolCall("call_b", "lookup", {"word": "x"})), Usage(20, 9), Finish("tool_calls")]


async def test_openai_reports_arguments_that_are_not_json_on_the_call(fake_openai, openai_settings):
    fake_openai.script(ToolCalls([Call("lookup", '{"word": "unterminated', id="call_bad")]))

    events = await events_of(get_provider(openai_settings), hello_request(tools=[LOOKUP]))

    call = events[0].call
    assert (call.id, call.name, call.arguments) == ("call_bad", "lookup", {})
    assert "not valid JSON" in call.arguments_error


async def test_openai_accepts_whole_tool_calls_without_an_index_as_older_servers_send_them(fake_openai,
                                                                                          openai_settings):
    chunk = {"choices": [{"index": 0, "delta": {"tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"word": "a"}'}},
        {"id": "c2", "type": "function", "function": {"name": "lookup", "arguments": '{"word": "b"}'}}]},
        "finish_reason": "tool_calls"}]}
    fake_openai.script(Raw(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n"))

    events = await events_of(get_provider(openai_settings), hello_request(tools=[LOOKUP]))

    assert events == [ToolCallEvent(ToolCall("c1", "lookup", {"word": "a"})),
                      ToolCallEvent(ToolCall("c2", "lookup", {"word": "b"})), Finish("tool_calls")]


async def test_openai_answers_without_streaming(fake_openai, openai_settings):
    fake_openai.script(Text("The whole answer.", usage=(30, 3)),
                       ToolCalls([Call("lookup", {"word": "w"}, id="call_1")], text="Checking."))
    provider = get_provider(openai_settings)

    text = await provider.complete(hello_request())
    calls = await provider.complete(hello_request(tools=[LOOKUP]))

    assert text == Completion("The whole answer.", [], Usage(30, 3), "stop")
    assert calls == Completion("Checking.", [ToolCall("call_1", "lookup", {"word": "w"})], Usage(20, 9), "tool_calls")
    assert [body["stream"] for body in fake_openai.bodies()] == [False, False]
    assert "stream_options" not in fake_openai.bodies()[0]


async def test_openai_passes_client_tools_and_tool_choice_through(fake_openai, openai_settings):
    fake_openai.script(Text("ok"), Text("ok"))
    choice = {"type": "function", "function": {"name": "lookup"}}
    provider = get_provider(openai_settings)

    await provider.complete(hello_request(tools=[LOOKUP], tool_choice=choice))
    await events_of(provider, hello_request(tools=[LOOKUP], tool_choice="required"))

    assert [body["tool_choice"] for body in fake_openai.bodies()] == [choice, "required"]


async def test_openai_sends_images_as_data_urls_and_tool_history_in_its_shape(fake_openai, openai_settings):
    fake_openai.script(Text("A cat."))
    call = ToolCall("call_1", "lookup", {"word": "cat"})
    messages = [
        Message("user", [TextPart("What is this?"), ImagePart("image/png", PNG)]),
        Message("assistant", "Let me check.", tool_calls=[call]),
        Message("tool", [TextPart("a small animal"), ImagePart("image/png", PNG)], tool_call_id="call_1",
                name="lookup"),
        Message("tool", "", tool_call_id="call_2", name="lookup", is_error=True),
    ]
    messages[1].tool_calls.append(ToolCall("call_2", "lookup", {"word": "dog"}))

    await events_of(get_provider(openai_settings), ChatRequest(messages, [LOOKUP]))

    image = {"type": "image_url", "image_url": {"url": ImagePart("image/png", PNG).data_url}}
    assert fake_openai.bodies()[0]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"word": "cat"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "lookup", "arguments": '{"word": "dog"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a small animal"},
        {"role": "tool", "tool_call_id": "call_2", "content": "[tool error] (no output)"},
        {"role": "user", "content": [
            {"type": "text", "text": "The image(s) returned by the tool lookup (call call_1):"}, image]},
    ]
    assert image["image_url"]["url"].startswith("data:image/png;base64,iVBORw0KGgo")


async def test_openai_reads_on_past_done_so_the_connection_is_reused(fake_openai, openai_settings):
    fake_openai.script(Text("one"), Text("two"))
    provider = get_provider(openai_settings)

    await events_of(provider, hello_request())
    await events_of(provider, hello_request())

    first, second = fake_openai.requests
    assert first.connection == second.connection
    assert fake_openai.hangups == 0


async def test_events_sent_together_come_in_one_batch_and_paced_ones_each_at_once(fake_openai, openai_settings):
    """stream_batches groups what one network read brought (cheaper to write out) and never holds an event for
    a later read; flattened, it is stream() event for event."""
    chunks = [{"choices": [{"index": 0, "delta": {"content": f"w{i} "}}]} for i in range(40)]
    chunks += [{"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
               {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 40}}]
    body = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n"
    provider = get_provider(openai_settings)
    fake_openai.script(Raw(body), Raw(body))  # the whole stream in one write, as a fast upstream's burst
    batches = [batch async for batch in provider.stream_batches(hello_request())]
    events = [event for batch in batches for event in batch]
    assert events == await events_of(provider, hello_request())
    assert events[:2] == [TextDelta("w0 "), TextDelta("w1 ")] and events[-2:] == [Usage(3, 40), Finish("stop")]
    # 42 events in one read: one list (and the ending), not 42; only the first may be empty (the upstream
    # answered before its body came: Provider.stream_batches).
    assert all(batches[1:]) and len([batch for batch in batches if batch]) <= 3

    # Paced by the reader: each piece is sent only once the batch before it has come out, so an event held
    # back for a later read would never come out at all (the read it waits for is not sent).
    step = threading.Semaphore(0)
    lines = [f"data: {json.dumps({'choices': [{'index': 0, 'delta': {'content': word}}]})}\n\n"
             for word in ("one ", "two ", "three")]
    ending = f"data: {json.dumps({'choices': [{'index': 0, 'delta': {}, 'finish_reason': 'stop'}]})}\n\n" \
             "data: [DONE]\n\n"
    fake_openai.script(Raw("", pieces=[lines[0], lines[1], lines[2] + ending], step=step))
    texts = []
    async with asyncio.timeout(10):  # failure bound: a held event stalls the stream
        async for batch in provider.stream_batches(hello_request()):
            words = [event.text for event in batch if isinstance(event, TextDelta)]
            if words:
                texts.append(words)
                step.release()
    assert texts == [["one "], ["two "], ["three"]]


async def test_a_malformed_chunk_after_good_ones_in_one_read_still_delivers_the_good_ones(fake_openai,
                                                                                         openai_settings):
    good = 'data: {"choices":[{"index":0,"delta":{"content":"kept"}}]}\n\n'
    fake_openai.script(Raw(good + 'data: {"choices": "not a list"}\n\n'))
    seen = []
    try:
        async for event in get_provider(openai_settings).stream(hello_request()):
            seen.append(event)
    except AppError as exc:
        assert "malformed" in exc.message
    else:
        raise AssertionError("the malformed chunk was not refused")
    assert seen == [TextDelta("kept")]


async def test_a_servers_stop_reason_names_the_stop_sequence_only_when_it_is_one_asked_for(fake_openai,
                                                                                         openai_settings):
    """vLLM's `stop_reason` (a stop string, or a stop token's id) names the sequence; OpenAI's own API has none."""
    def reply(stop_reason) -> Raw:
        return Raw(json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "one "},
                                            "finish_reason": "stop", "stop_reason": stop_reason}]}),
                   content_type="application/json")

    fake_openai.script(reply("END"), reply("OTHER"), reply(128001), reply(None))
    provider = get_provider(openai_settings)
    request = hello_request(settings=ModelSettings(stop=["END"]))
    said = [(await provider.complete(request)).stop_sequence for _ in range(4)]
    assert said == ["END", None, None, None]

    fake_openai.reports_stop_reason = True
    fake_openai.script(Text("one END two", pieces=["one E", "ND two"]))
    events = await events_of(provider, request)
    assert events[0] == TextDelta("one ") and events[-1] == Finish("stop", "END")


# What each wire format sends first (no event of the runtime's) and then, held, its first token and its end.
OPENINGS = {
    "openai": ('data: {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}\n\n',
               'data: {"choices": [{"index": 0, "delta": {"content": "held"}, "finish_reason": "stop"}]}\n\n'
               "data: [DONE]\n\n"),
    "anthropic": ('event: message_start\ndata: {"type": "message_start", "message": {"id": "msg_1", "usage": '
                  '{"input_tokens": 3, "output_tokens": 0}}}\n\n',
                  'event: content_block_start\ndata: {"type": "content_block_start", "index": 0, "content_block": '
                  '{"type": "text", "text": ""}}\n\nevent: content_block_delta\ndata: {"type": "content_block_delta",'
                  ' "index": 0, "delta": {"type": "text_delta", "text": "held"}}\n\nevent: content_block_stop\ndata: '
                  '{"type": "content_block_stop", "index": 0}\n\nevent: message_delta\ndata: {"type": '
                  '"message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}}\n\n'
                  'event: message_stop\ndata: {"type": "message_stop"}\n\n'),
}


async def test_an_upstream_that_answers_and_thinks_gives_an_empty_first_list_at_once(upstream):
    """The upstream's success status (and an opening that holds no event) comes out at once as an empty first
    list, so a door can start its reply while the model thinks; the first token follows in its own list.
    The fake holds the token until the test releases it, which it does only on seeing the first list."""
    fake, settings = upstream
    opening, held = OPENINGS[settings.provider]
    step = threading.Semaphore(0)
    fake.script(Raw("", pieces=[opening, held], step=step))
    batches = []
    async with asyncio.timeout(10):  # failure bound: without the empty list nothing comes for 30 s
        async for batch in get_provider(settings).stream_batches(hello_request()):
            batches.append(batch)
            step.release()
    assert batches[0] == [] and all(batches[1:])
    assert [event for batch in batches for event in batch if isinstance(event, TextDelta)] == [TextDelta("held")]
    assert isinstance(batches[-1][-1], Finish)

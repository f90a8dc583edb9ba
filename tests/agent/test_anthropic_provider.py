"""The anthropic provider against the fake /v1/messages server."""

from __future__ import annotations

from agentsite.agent.providers import AnthropicProvider, get_provider
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
from tests.agent.conftest import API_KEY
from tests.fakes.llm import Call, Text, ToolCalls

PNG = b"\x89PNG\r\n\x1a\n fake image bytes"
LOOKUP = ToolSpec("lookup", "Look a word up.", {"type": "object", "properties": {"word": {"type": "string"}}})


def hello_request(**changes) -> ChatRequest:
    return ChatRequest([Message("system", "Be brief."), Message("user", "Hello?")], **changes)


async def events_of(provider, request) -> list:
    return [event async for event in provider.stream(request)]


async def test_anthropic_streams_text_deltas_then_usage_then_finish(fake_anthropic, anthropic_settings):
    fake_anthropic.script(Text("Hi, friend.", pieces=["Hi", ",", " friend."], usage=(11, 3)))

    events = await events_of(get_provider(anthropic_settings), hello_request())

    assert events == [TextDelta("Hi"), TextDelta(","), TextDelta(" friend."), Usage(11, 3), Finish("stop")]


async def test_anthropic_sends_the_messages_wire_request(fake_anthropic, anthropic_settings):
    fake_anthropic.script(Text("ok"))
    request = hello_request(tools=[LOOKUP], settings=ModelSettings(temperature=0.3, max_tokens=64, stop=["END"]))

    await events_of(get_provider(anthropic_settings), request)

    sent = fake_anthropic.requests[0]
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == API_KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.json() == {
        "model": "claude-fake", "max_tokens": 64, "stream": True, "system": "Be brief.", "temperature": 0.3,
        "stop_sequences": ["END"], "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello?"}]}],
        "tools": [{"name": "lookup", "description": "Look a word up.", "input_schema": LOOKUP.input_schema}],
    }


async def test_anthropic_accepts_a_base_url_that_ends_in_v1(fake_anthropic):
    fake_anthropic.script(Text("ok"))

    await events_of(AnthropicProvider(base_url=fake_anthropic.base_url + "/v1/"), hello_request())

    assert fake_anthropic.requests[0].path == "/v1/messages"
    assert fake_anthropic.requests[0].json()["max_tokens"] == 1024  # required by the API, so always sent


async def test_anthropic_turns_tool_use_blocks_into_tool_calls(fake_anthropic, anthropic_settings):
    arguments = {"word": "serendipity", "nested": {"deep": [1, 2, 3]}}
    fake_anthropic.script(ToolCalls([Call("lookup", arguments, id="toolu_a"), Call("lookup", {}, id="toolu_b")],
                                    text="Let me look."))

    events = await events_of(get_provider(anthropic_settings), hello_request(tools=[LOOKUP]))

    assert events == [TextDelta("Let me "), TextDelta("look."),
                      ToolCallEvent(ToolCall("toolu_a", "lookup", arguments)),
                      ToolCallEvent(ToolCall("toolu_b", "lookup", {})), Usage(20, 9), Finish("tool_calls")]


async def test_anthropic_answers_without_streaming(fake_anthropic, anthropic_settings):
    fake_anthropic.script(Text("Whole.", usage=(5, 1), finish_reason="length"),
                          ToolCalls([Call("lookup", {"word": "w"}, id="toolu_1")]))
    provider = get_provider(anthropic_settings)

    text = await provider.complete(hello_request())
    calls = await provider.complete(hello_request(tools=[LOOKUP]))

    assert text == Completion("Whole.", [], Usage(5, 1), "length")
    assert calls == Completion("", [ToolCall("toolu_1", "lookup", {"word": "w"})], Usage(20, 9), "tool_calls")
    assert [body["stream"] for body in fake_anthropic.bodies()] == [False, False]


async def test_anthropic_translates_tool_choice_from_the_openai_vocabulary(fake_anthropic, anthropic_settings):
    choices = ["auto", "none", "required", {"type": "function", "function": {"name": "lookup"}},
               {"type": "tool", "name": "lookup"}]
    fake_anthropic.script(*[Text("ok") for _ in choices])
    provider = get_provider(anthropic_settings)

    for choice in choices:
        await provider.complete(hello_request(tools=[LOOKUP], tool_choice=choice))

    assert [body["tool_choice"] for body in fake_anthropic.bodies()] == [
        {"type": "auto"}, {"type": "none"}, {"type": "any"}, {"type": "tool", "name": "lookup"},
        {"type": "tool", "name": "lookup"}]


async def test_anthropic_sends_images_as_base64_sources_and_merges_tool_results_into_one_user_turn(
        fake_anthropic, anthropic_settings):
    fake_anthropic.script(Text("A cat."))
    calls = [ToolCall("toolu_1", "lookup", {"word": "cat"}), ToolCall("toolu_2", "lookup", {"word": "dog"})]
    messages = [
        Message("system", "Be brief."),
        Message("user", [TextPart("What is this?"), ImagePart("image/png", PNG)]),
        Message("assistant", "", tool_calls=calls),
        Message("tool", [TextPart("a small animal"), ImagePart("image/png", PNG)], tool_call_id="toolu_1"),
        Message("tool", "no such word", tool_call_id="toolu_2", is_error=True),
        Message("user", "And now?"),
    ]

    await events_of(get_provider(anthropic_settings), ChatRequest(messages, [LOOKUP]))

    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": ImagePart("image/png", PNG).base64}}
    assert fake_anthropic.bodies()[0]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"word": "cat"}},
            {"type": "tool_use", "id": "toolu_2", "name": "lookup", "input": {"word": "dog"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": False,
             "content": [{"type": "text", "text": "a small animal"}, image]},
            {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
             "content": [{"type": "text", "text": "no such word"}]},
            {"type": "text", "text": "And now?"}]},
    ]


async def test_anthropic_caps_temperature_at_its_range(fake_anthropic, anthropic_settings):
    fake_anthropic.script(Text("ok"))

    await get_provider(anthropic_settings).complete(hello_request(settings=ModelSettings(temperature=1.7)))

    assert fake_anthropic.bodies()[0]["temperature"] == 1.0


async def test_anthropic_names_the_stop_sequence_it_stopped_on(fake_anthropic, anthropic_settings):
    fake_anthropic.script(Text("one END two"), Text("one END two", pieces=["one E", "ND two"]), Text("done"))
    provider = get_provider(anthropic_settings)
    request = hello_request(settings=ModelSettings(stop=["END"]))

    whole = await provider.complete(request)
    events = await events_of(provider, request)
    natural = await provider.complete(request)

    assert (whole.text, whole.finish_reason, whole.stop_sequence) == ("one ", "stop", "END")
    assert events[0] == TextDelta("one ") and events[-1] == Finish("stop", "END")
    assert (natural.finish_reason, natural.stop_sequence) == ("stop", None)

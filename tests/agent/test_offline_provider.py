"""The offline stand-in: deterministic, streamed in several deltas, no network."""

from __future__ import annotations

from agentsite.agent.config import AgentSettings
from agentsite.agent.context import ContextBlock, format_reference
from agentsite.agent.providers import OfflineProvider, default_model, get_provider
from agentsite.agent.types import (
    ChatRequest,
    Finish,
    ImagePart,
    Message,
    ModelSettings,
    TextDelta,
    TextPart,
    ToolCallEvent,
    ToolSpec,
    Usage,
)

WEB_FETCH = ToolSpec("web_fetch", "Fetch a page.", {"type": "object"})


async def events_of(request: ChatRequest) -> list:
    return [event async for event in OfflineProvider().stream(request)]


def text_of(events: list) -> str:
    return "".join(event.text for event in events if isinstance(event, TextDelta))


async def test_offline_is_the_default_provider_and_says_plainly_that_no_llm_is_configured():
    provider = get_provider(AgentSettings())
    events = [event async for event in provider.stream(ChatRequest([Message("user", "What is the capital of Peru?")]))]

    assert isinstance(provider, OfflineProvider)
    assert default_model("offline") == "offline"
    assert text_of(events).startswith("No LLM is configured")
    assert text_of(events).endswith("You said: What is the capital of Peru?")
    assert sum(isinstance(event, TextDelta) for event in events) >= 5
    assert isinstance(events[-2], Usage) and events[-2].completion_tokens > 0
    assert events[-1] == Finish("stop")


async def test_offline_answers_are_deterministic():
    request = ChatRequest([Message("user", '/tool web_fetch {"url": "https://example.com"}')], [WEB_FETCH])

    assert await events_of(request) == await events_of(request)


async def test_offline_answers_from_the_knowledge_base_context_it_was_given():
    reference = format_reference([ContextBlock("[notes.md] The launch code is 1234.")])
    request = ChatRequest([Message("system", f"Be helpful.\n\n{reference}"), Message("user", "What is the code?")])

    answer = text_of(await events_of(request))

    assert "knowledge base" in answer
    assert "[notes.md] The launch code is 1234." in answer
    assert "Be helpful" not in answer


async def test_offline_runs_a_tool_when_the_message_asks_explicitly():
    request = ChatRequest([Message("user", '/tool web_fetch {"url": "https://example.com"}')], [WEB_FETCH])

    events = await events_of(request)

    calls = [event.call for event in events if isinstance(event, ToolCallEvent)]
    assert [(call.name, call.arguments) for call in calls] == [("web_fetch", {"url": "https://example.com"})]
    assert events[-1] == Finish("tool_calls")


async def test_offline_does_not_run_a_tool_it_was_not_offered():
    events = await events_of(ChatRequest([Message("user", '/tool web_fetch {"url": "https://example.com"}')]))

    assert not any(isinstance(event, ToolCallEvent) for event in events)
    assert "not available" in text_of(events)
    assert events[-1] == Finish("stop")


async def test_offline_explains_tool_arguments_that_are_not_a_json_object():
    events = await events_of(ChatRequest([Message("user", "/tool web_fetch https://example.com")], [WEB_FETCH]))

    assert "must be a JSON object" in text_of(events)
    assert not any(isinstance(event, ToolCallEvent) for event in events)


async def test_offline_reports_what_the_tool_returned():
    request = ChatRequest([Message("user", "/tool web_fetch {}"), Message("assistant", "", tool_calls=[]),
                           Message("tool", "Example Domain text", tool_call_id="c1", name="web_fetch")], [WEB_FETCH])

    answer = text_of(await events_of(request))

    assert answer == "The tool web_fetch returned:\n\nExample Domain text"


async def test_offline_mentions_attached_images():
    message = Message("user", [TextPart("Look"), ImagePart("image/png", b"png")])

    assert "(1 image attached): Look" in text_of(await events_of(ChatRequest([message])))


async def test_offline_stops_at_max_tokens_with_finish_reason_length():
    events = await events_of(ChatRequest([Message("user", "hi")], settings=ModelSettings(max_tokens=4)))

    assert text_of(events) == "No LLM is configured, "
    assert events[-1] == Finish("length")


async def test_offline_answers_without_streaming_too():
    completion = await OfflineProvider().complete(ChatRequest([Message("user", "ping")]))

    assert completion.text.endswith("You said: ping")
    assert completion.finish_reason == "stop"

"""The agent loop end to end against the fake upstreams: events, tool rounds, context, limits, failures."""

from __future__ import annotations

import asyncio
import base64
import logging

import pytest

from agentsite.agent.config import AgentSettings, set_settings_loader, settings_loader, settings_peek
from agentsite.agent.context import ContextBlock
from agentsite.agent.loop import AgentEvent, run_agent
from agentsite.agent.tools import Tool, ToolResult
from agentsite.agent.types import ImagePart, Message, TextPart, ToolCall
from tests.agent.conftest import text_tool
from tests.fakes.llm import Call, Error, Text, ToolCalls

WORD_SCHEMA = {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}


async def shout(arguments, ctx) -> str:
    return arguments["word"].upper()


async def run(settings: AgentSettings, text: str = "Shout hi.", **kwargs) -> list[AgentEvent]:
    # No user: the caller is resolved without a database (a user id would be looked up: admin or not).
    return [event async for event in run_agent(messages=[Message("user", text)], user_id=None, settings=settings,
                                               **kwargs)]


def sequence(events: list[AgentEvent]) -> list[tuple[str, dict]]:
    return [(event.type, event.data) for event in events]


async def test_a_tool_round_runs_end_to_end_and_feeds_the_result_back(upstream, tool_source):
    fake, settings = upstream
    tool_source.append(text_tool("shout", shout, WORD_SCHEMA))
    fake.script(ToolCalls([Call("shout", {"word": "hi"}, id="call_1")], text="Checking."), Text("It says HI."))

    events = await run(settings.with_overrides(tools=("shout",), system_prompt="Be loud."))

    assert sequence(events) == [
        ("delta", {"content": "Checking."}),
        ("tool_call", {"id": "call_1", "name": "shout", "arguments": {"word": "hi"}}),
        ("tool_result", {"id": "call_1", "name": "shout", "content": "HI", "is_error": False}),
        ("delta", {"content": "\n\nIt says "}),
        ("delta", {"content": "HI."}),
        ("done", {"content": "Checking.\n\nIt says HI.", "finish_reason": "stop",
                  "usage": {"prompt_tokens": 32, "completion_tokens": 16, "total_tokens": 48}, "sources": []}),
    ]
    done = events[-1]
    assert done.messages == [
        Message("assistant", "Checking.", tool_calls=[ToolCall("call_1", "shout", {"word": "hi"})]),
        Message("tool", [TextPart("HI")], tool_call_id="call_1", name="shout"),
        Message("assistant", "It says HI."),
    ]
    assert done.partial == done.data["content"]
    first, second = fake.bodies()
    assert [tool.get("name") or tool["function"]["name"] for tool in first["tools"]] == ["shout"]
    assert "call_1" in str(second["messages"]) and "HI" in str(second["messages"])


async def test_the_system_prompt_comes_from_the_settings(fake_openai, openai_settings):
    fake_openai.script(Text("ok"))

    await run(openai_settings.with_overrides(system_prompt="You are a pirate."), use_tools=False)

    assert fake_openai.bodies()[0]["messages"] == [{"role": "system", "content": "You are a pirate."},
                                                   {"role": "user", "content": "Shout hi."}]
    assert "tools" not in fake_openai.bodies()[0]


async def test_several_tool_calls_in_one_round_run_concurrently(upstream, tool_source):
    fake, settings = upstream
    arrived = {"left": asyncio.Event(), "right": asyncio.Event()}

    def meets(me: str, other: str):
        async def wait_for_the_other(arguments, ctx) -> str:
            arrived[me].set()
            try:
                await asyncio.wait_for(arrived[other].wait(), 3)
            except TimeoutError:
                return f"{me} ran alone"
            return f"{me} met {other}"
        return wait_for_the_other

    tool_source.extend([text_tool("left", meets("left", "right")), text_tool("right", meets("right", "left"))])
    fake.script(ToolCalls([Call("left", {}, id="c_left"), Call("right", {}, id="c_right")]), Text("Both done."))

    events = await run(settings.with_overrides(tools=("left", "right")))

    results = {event.data["id"]: event.data["content"] for event in events if event.type == "tool_result"}
    assert results == {"c_left": "left met right", "c_right": "right met left"}
    assert [message.tool_call_id for message in events[-1].messages if message.role == "tool"] == ["c_left", "c_right"]
    assert events[-1].type == "done"


async def test_the_loop_stops_after_eight_tool_rounds_and_asks_for_a_final_answer(upstream, tool_source):
    fake, settings = upstream
    tool_source.append(text_tool("shout", shout, WORD_SCHEMA))

    def reply(request):
        choice = request.json().get("tool_choice")
        if choice in ("none", {"type": "none"}):
            return Text("Final answer.")
        return ToolCalls([Call("shout", {"word": "again"})])

    fake.script(*[reply] * 20)

    events = await run(settings.with_overrides(tools=("shout",)))

    assert [event.type for event in events].count("tool_result") == 8
    bodies = fake.bodies()
    assert len(bodies) == 9
    assert [body.get("tool_choice") for body in bodies[:8]] == [None] * 8
    assert bodies[8]["tool_choice"] in ("none", {"type": "none"})
    assert events[-1].type == "done"
    assert events[-1].data["finish_reason"] == "stop"
    assert events[-1].messages[-1] == Message("assistant", "Final answer.")


async def test_calls_the_model_still_makes_after_the_last_round_are_not_run(fake_openai, openai_settings, tool_source):
    tool_source.append(text_tool("shout", shout, WORD_SCHEMA))
    fake_openai.script(*[ToolCalls([Call("shout", {"word": "x"})], text="More.")] * 3)

    events = await run(openai_settings.with_overrides(tools=("shout",)), max_rounds=2)

    assert [event.type for event in events].count("tool_call") == 2
    assert len(fake_openai.requests) == 3
    assert events[-1].data["finish_reason"] == "max_rounds"
    assert events[-1].messages[-1] == Message("assistant", "More.")


@pytest.mark.django_db  # a user's model call asks their groups' model access (organisation.modelaccess)
async def test_context_sources_go_into_the_system_prompt_and_their_sources_into_done(fake_openai, openai_settings,
                                                                                    add_context_source, caplog):
    asked = []

    async def knowledge(request):
        asked.append((request.user_id, request.query, request.settings.kb_top_k))
        return ContextBlock("[handbook.md] Holidays are in August.", [{"document_id": "d1", "filename": "handbook.md"}])

    async def broken(request):
        raise RuntimeError("index missing")

    async def empty(request):
        return None

    add_context_source("kb", knowledge)
    add_context_source("broken", broken)
    add_context_source("empty", empty)
    fake_openai.script(Text("In August."))
    history = [Message("user", "Old question"), Message("assistant", "Old answer"), Message("user", "When off?")]

    with caplog.at_level(logging.ERROR):
        events = [event async for event in run_agent(messages=history, user_id=5, settings=openai_settings,
                                                     use_tools=False)]  # tools would look the user up

    assert asked == [(5, "When off?", 5)]
    system = fake_openai.bodies()[0]["messages"][0]
    assert system["role"] == "system"
    assert system["content"].startswith("You are a helpful assistant.\n\nReference material")
    assert "<reference>\n[handbook.md] Holidays are in August.\n</reference>" in system["content"]
    assert events[-1].data["sources"] == [{"document_id": "d1", "filename": "handbook.md"}]
    assert "Context source 'broken' failed" in caplog.text


async def test_the_offline_provider_runs_web_fetch_through_the_loop(fake_web, settings):
    settings.AGENTSITE_ALLOW_PRIVATE_FETCH = True
    fake_web.page("/hello", "<html><head><title>Hi</title></head><body><article><p>Hello from the fake web, "
                            "a paragraph long enough to count as the main content of this page.</p></article>"
                            "</body></html>")

    events = await run(AgentSettings(), f'/tool web_fetch {{"url": "{fake_web.url("/hello")}"}}')

    kinds = [event.type for event in events]
    assert kinds[kinds.index("tool_call"):kinds.index("tool_result") + 1] == ["tool_call", "tool_result"]
    result = next(event for event in events if event.type == "tool_result")
    assert result.data["is_error"] is False
    assert "Hello from the fake web" in result.data["content"]
    assert events[-1].type == "done"
    assert "The tool web_fetch returned" in events[-1].data["content"]
    assert "".join(event.data["content"] for event in events if event.type == "delta") == events[-1].data["content"]


async def test_an_upstream_failure_ends_the_stream_with_one_error_event_keeping_what_was_done(upstream, tool_source):
    fake, settings = upstream
    tool_source.append(text_tool("shout", shout, WORD_SCHEMA))
    fake.script(ToolCalls([Call("shout", {"word": "a"}, id="call_1")], text="Working."), Error(503, "Overloaded."))

    events = await run(settings.with_overrides(tools=("shout",)))

    assert events[-1].type == "error"
    assert events[-1].data["code"] == "upstream_error"
    assert "Overloaded." in events[-1].data["message"]
    assert [event.type for event in events].count("error") == 1
    assert events[-1].partial == "Working."
    assert [message.role for message in events[-1].messages] == ["assistant", "tool"]


async def test_a_call_to_a_tool_that_was_not_offered_is_answered_with_a_tool_error(fake_openai, openai_settings,
                                                                                  tool_source):
    ran = []

    async def secret(arguments, ctx):
        ran.append(arguments)
        return "secret"

    tool_source.append(text_tool("secret", secret))
    fake_openai.script(ToolCalls([Call("secret", {}, id="call_1")]), Text("Sorry."))

    events = await run(openai_settings.with_overrides(tools=("web_fetch",)))

    result = next(event for event in events if event.type == "tool_result")
    assert result.data["is_error"] is True
    assert "no tool named 'secret'" in result.data["content"]
    assert ran == []
    assert events[-1].type == "done"


async def test_arguments_that_are_not_json_are_answered_with_a_tool_error(fake_openai, openai_settings, tool_source):
    tool_source.append(text_tool("shout", shout, WORD_SCHEMA))
    fake_openai.script(ToolCalls([Call("shout", '{"word": ', id="call_1")]), Text("Oops."))

    events = await run(openai_settings.with_overrides(tools=("shout",)))

    result = next(event for event in events if event.type == "tool_result")
    assert result.data["is_error"] is True
    assert "not valid JSON" in result.data["content"]
    assert "[tool error]" in str(fake_openai.bodies()[1]["messages"][-1])


async def test_a_tools_images_go_back_to_the_model(fake_anthropic, anthropic_settings, tool_source):
    png = b"\x89PNG\r\n\x1a\nimage"

    async def snap(arguments, ctx):
        return ToolResult([{"type": "image", "data": base64.b64encode(png).decode(), "mimeType": "image/png"},
                           {"type": "text", "text": "a screen"}])

    tool_source.append(Tool("snap", "Take a picture.", {"type": "object"}, snap, source="test"))
    fake_anthropic.script(ToolCalls([Call("snap", {}, id="toolu_1")]), Text("I see a screen."))

    events = await run(anthropic_settings.with_overrides(tools=("snap",)))

    result = next(event for event in events if event.type == "tool_result")
    assert result.data["content"] == "[image: image/png]\na screen"
    assert result.result.content[0]["mimeType"] == "image/png"
    tool_message = events[-1].messages[1]
    assert tool_message.content == [ImagePart("image/png", png), TextPart("a screen")]
    blocks = fake_anthropic.bodies()[1]["messages"][-1]["content"][0]["content"]
    assert blocks[0] == {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                     "data": base64.b64encode(png).decode()}}


async def test_without_settings_the_loop_reads_them_from_the_registered_loader(fake_openai, openai_settings):
    fake_openai.script(Text("loaded"))
    previous, previous_peek = settings_loader(), settings_peek()
    set_settings_loader(lambda: openai_settings.with_overrides(system_prompt="From the loader."))
    try:
        events = [event async for event in run_agent(messages=[Message("user", "hi")], user_id=None,
                                                     use_tools=False)]
    finally:
        set_settings_loader(previous, previous_peek)

    assert events[-1].data["content"] == "loaded"
    assert fake_openai.bodies()[0]["messages"][0]["content"] == "From the loader."


def test_an_event_without_a_transcript_has_no_messages_and_no_partial_text():
    event = AgentEvent("delta", {"content": "héllo"})

    assert event.messages == [] and event.partial == ""


@pytest.mark.parametrize("use_tools", [True, False])
async def test_the_offline_default_answers_with_a_done_event(use_tools):
    events = await run(AgentSettings(), "hello", use_tools=use_tools)

    assert [event.type for event in events][-1] == "done"
    assert set(event.type for event in events[:-1]) == {"delta"}
    assert events[-1].data["finish_reason"] == "stop"
    assert events[-1].data["usage"]["total_tokens"] > 0


async def test_the_events_of_one_upstream_read_come_in_one_list_and_run_agent_flattens_them(upstream):
    """run_agent_batches: the chat stream writes each list at once (one write per read of the model's reply,
    not per delta); run_agent gives the same events one by one."""
    from agentsite.agent.loop import run_agent_batches
    from agentsite.agent.providers.base import Provider
    from agentsite.agent.types import Finish, TextDelta, Usage

    class TwoReads(Provider):
        name, default_model = "two-reads", "m"

        async def stream(self, request):  # pragma: no cover - stream_batches is what the loop asks
            raise AssertionError("asked one event at a time")

        async def stream_batches(self, request):
            yield [TextDelta("One "), TextDelta("two ")]
            yield [TextDelta("three."), Usage(3, 3), Finish("stop")]

    _, settings = upstream
    batches = [[(event.type, event.data.get("content")) for event in batch] async for batch in run_agent_batches(
        messages=[Message("user", "Count.")], user_id=None, settings=settings, use_tools=False, provider=TwoReads())]
    assert batches == [[("delta", "One "), ("delta", "two ")], [("delta", "three.")],
                       [("done", "One two three.")]]
    flat = [(event.type, event.data.get("content")) async for event in run_agent(
        messages=[Message("user", "Count.")], user_id=None, settings=settings, use_tools=False, provider=TwoReads())]
    assert flat == [item for batch in batches for item in batch]


async def test_what_a_running_call_reports_streams_as_tool_progress_before_its_result(upstream, tool_source):
    from agentsite.agent.tooltypes import PROGRESS_MAX_CHARS, report_progress

    fake, settings = upstream

    async def slow(arguments, ctx) -> str:
        report_progress("asked the remote")
        await asyncio.sleep(0)
        report_progress("")  # nothing to say: nothing sent
        report_progress("x" * (PROGRESS_MAX_CHARS + 5))
        return "answer"

    tool_source.append(text_tool("slow", slow, WORD_SCHEMA))
    fake.script(ToolCalls([Call("slow", {"word": "a"}, id="call_1")]), Text("Done."))
    events = await run(settings.with_overrides(tools=("slow",)))

    kinds = [(event.type, event.data.get("content")) for event in events if event.type.startswith("tool_")]
    assert kinds == [("tool_call", None), ("tool_progress", "asked the remote"),
                     ("tool_progress", "x" * (PROGRESS_MAX_CHARS - 1) + "…"), ("tool_result", "answer")]
    assert events[1].data == {"id": "call_1", "name": "slow", "content": "asked the remote"}
    # Progress is shown, never stored: the transcript has the call and its result only.
    assert [message.role for message in events[-1].messages] == ["assistant", "tool", "assistant"]
    report_progress("outside any run")  # a no-op, never an error

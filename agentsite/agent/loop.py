"""The agent loop: messages -> provider -> tool calls -> results -> provider ... -> a final answer.

Chat sessions, the /v1 `agent` model, the scheduler and workflows all drive this one function. It yields
the chat stream's events (docs/api.md): `delta {content}`, `tool_call {id, name, arguments}`, `tool_progress {id,
name, content}` (what a running call reports: tooltypes.report_progress), `tool_result {id, name, content,
is_error}`, then `done {content, finish_reason, usage, sources}` or `error {code, message}`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from agentsite.agent.config import AgentSettings, aget_settings
from agentsite.agent.context import (
    ContextBlock,
    ContextRequest,
    context_sources,
    context_sources_now,
    format_reference,
)
from agentsite.agent.multimodal import parts_from_tool_content
from agentsite.agent.providers import Provider
from agentsite.agent.routing import routed_provider
from agentsite.agent.tools import Tool, ToolContext, ToolResult, call_tool, registry, resolve_caller
from agentsite.agent.tooltypes import listen_progress
from agentsite.agent.types import (
    ChatRequest,
    Finish,
    Message,
    ModelSettings,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    Usage,
)
from agentsite.agent.usage import Caller, caller_for, metered
from agentsite.core import tracing
from agentsite.core.errors import AppError

logger = logging.getLogger(__name__)

MAX_ROUNDS = 8
CONTEXT_TIMEOUT = 15.0


class Transcript:
    """What one run has produced so far: the new messages (assistant turns with their tool calls, tool
    results, the final answer), all streamed text, each tool result as it arrived, the summed usage, the
    context sources and, once it finished, the finish reason. It is the one record of a run: a caller that
    stores a turn (however it ended) reads it, and may pass its own in to keep a handle on it.
    """

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.text_parts: list[str] = []
        self.usage = Usage()
        self.sources: list[dict[str, Any]] = []
        self.finish_reason = ""
        self.results: dict[str, ToolResult] = {}  # by call id, as each call finishes
        self.durations: dict[str, int] = {}  # by call id: how long the call ran, in milliseconds
        self.streaming_calls: list[ToolCall] = []  # announced in the round now streaming, not yet in messages
        self.answered = ""  # the catalogue entry that answered the last round (routing.Attempts.answered)

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def tool_calls(self) -> list[dict[str, Any]]:
        """Every call announced so far with its result (None while unfinished), as a stored turn keeps them:
        `{id, name, arguments, result: {content, is_error, duration_ms} | None}`."""
        calls = [call for message in self.messages for call in message.tool_calls] + self.streaming_calls
        return [{"id": call.id, "name": call.name, "arguments": call.arguments,
                 "result": _result_record(self.results.get(call.id), self.durations.get(call.id))}
                for call in calls]


def _result_record(result: ToolResult | None, duration_ms: int | None) -> dict[str, Any] | None:
    if result is None:
        return None
    return {"content": result.text, "is_error": result.is_error, "duration_ms": duration_ms}


@dataclass
class AgentEvent:
    """One stream event. `data` is exactly what the chat stream sends; the rest is for the caller only.

    `transcript` is the run's record, read at the time it is read: on `done` and `error` it holds the new
    messages to store and the text streamed so far.
    """

    type: str  # delta | tool_call | tool_progress | tool_result | done | error
    data: dict[str, Any]
    transcript: Transcript | None = field(default=None, repr=False, compare=False)
    result: ToolResult | None = field(default=None, repr=False, compare=False)  # tool_result: images included

    @property
    def messages(self) -> list[Message]:
        return list(self.transcript.messages) if self.transcript else []

    @property
    def partial(self) -> str:
        return self.transcript.text if self.transcript else ""


@dataclass(frozen=True)
class Prepared:
    """What a run asks before its first call to the model, asked already (prepare_now): the context sources'
    blocks and the caller's tools."""

    blocks: list[ContextBlock]
    tools: list[Tool]


def prepare_now(*, messages: list[Message], user_id: int | None, is_admin: bool, settings: AgentSettings,
                ) -> Prepared | None:
    """The context blocks and tools a run of these messages would ask for, in this thread (sync: a database
    thread, such as the one a chat turn reads its session on), or None when a source can only answer
    asynchronously (an MCP server to connect, a context source without a sync variant): the run then asks
    them itself. A context source that fails is left out (logged), as in a run."""
    tools = registry.list_tools_now(ToolContext(user_id, is_admin), settings) if settings.tools else []
    if tools is None:
        return None
    query = _latest_user_text(messages)
    sources = context_sources_now() if query.strip() else {}
    if sources is None:
        return None
    request = ContextRequest(user_id, query, settings)
    blocks = []
    for name, source in sources.items():
        try:
            block = source(request)
        except Exception:  # a boundary: a broken knowledge base must not break the chat
            logger.exception("Context source %r failed", name)
            continue
        if block is not None:
            blocks.append(block)
    return Prepared(blocks, tools)


def _latest_user_text(messages: list[Message]) -> str:
    return next((message.text for message in reversed(messages) if message.role == "user"), "")


def model_settings(settings: AgentSettings) -> ModelSettings:
    return ModelSettings(model=settings.model, temperature=settings.temperature, max_tokens=settings.max_tokens)


async def run_agent(*, messages: list[Message], user_id: int | None, settings: AgentSettings | None = None,
                    use_tools: bool = True, max_rounds: int = MAX_ROUNDS, provider: Provider | None = None,
                    transcript: Transcript | None = None, caller: Caller | None = None,
                    is_admin: bool | None = None,
                    ) -> AsyncGenerator[AgentEvent, None]:
    """Run the agent on a conversation (oldest first, the latest user message last) and stream its events.

    At most `max_rounds` rounds run tools; then the model is asked once more with tool_choice "none" for
    a final answer. Never raises (but CancelledError): failures end the stream with one `error` event.
    `provider` overrides the one the settings name (by default the settings' `model` is resolved in the model
    catalogue and answered through the router: fallback and balance apply); `transcript` (a new one) is filled
    as the run goes. `is_admin` False keeps an admin's tools from a caller who is not acting as one (an API key
    without the admin scope); None looks the user up.
    Every call to the model is metered for `caller` (default: the task's caller when it is this user, else
    this user with the facet `agent`): a refused call ends the run with an `error` event (`budget_exceeded`
    or `rate_limited`).
    """
    async with aclosing(run_agent_batches(messages=messages, user_id=user_id, settings=settings, use_tools=use_tools,
                                          max_rounds=max_rounds, provider=provider, transcript=transcript,
                                          caller=caller, is_admin=is_admin)) as batches:
        async for batch in batches:
            for event in batch:
                yield event


async def run_agent_batches(*, messages: list[Message], user_id: int | None, settings: AgentSettings | None = None,
                            use_tools: bool = True, max_rounds: int = MAX_ROUNDS, provider: Provider | None = None,
                            transcript: Transcript | None = None, caller: Caller | None = None,
                            is_admin: bool | None = None, prepared: Prepared | None = None,
                            ) -> AsyncGenerator[list[AgentEvent], None]:
    """run_agent's events in lists, in the same order: a list holds the events that were ready together (one
    network read of the model's reply, or one tool result) and is never empty, so a stream that writes a list
    out as it comes (the chat stream: one write per list, not per delta) delays no event. The transcript
    holds a list's events when the list is yielded. `prepared` (prepare_now, for the same messages, user,
    is_admin and settings) replaces the run's own asking of the context sources and the tool listing."""
    settings = settings or await aget_settings()
    run = _AgentRun(messages, user_id, settings, use_tools, max_rounds, provider, transcript or Transcript(),
                    is_admin)
    run.prepared = prepared
    run.caller = caller or caller_for(user_id)
    async with aclosing(run.batches()) as batches:
        async for batch in batches:
            yield batch


class _AgentRun:
    def __init__(self, messages: list[Message], user_id: int | None, settings: AgentSettings, use_tools: bool,
                 max_rounds: int, provider: Provider | None, transcript: Transcript, is_admin: bool | None = None):
        self.messages = messages
        self.ctx = ToolContext(user_id, None if is_admin is None or user_id is None else is_admin)
        self.settings = settings
        self.use_tools = use_tools
        self.max_rounds = max(0, max_rounds)
        self.provider = provider
        self.transcript = transcript
        self.caller: Caller | None = None
        self.span: Any = None  # the turn's `invoke_agent` span, while tracing is on
        self.prepared: Prepared | None = None

    def event(self, kind: str, data: dict[str, Any], result: ToolResult | None = None) -> AgentEvent:
        return AgentEvent(kind, data, self.transcript, result)

    async def batches(self) -> AsyncGenerator[list[AgentEvent], None]:
        # Each nested generator is closed explicitly (aclosing), so closing the run closes the upstream
        # request at once rather than whenever the garbage collector gets to it.
        # The turn's span (None when tracing is off) is started here, a child of whatever span is current for
        # the consumer's first step, and made current only within steps that do not yield (tracing's rule).
        self.span = _agent_span(self.settings)
        failure: BaseException | str | None = None
        try:
            async with aclosing(self._rounds()) as rounds:
                async for batch in rounds:
                    yield batch
        except AppError as exc:
            failure = exc.code
            data: dict[str, Any] = {"code": exc.code, "message": exc.message}
            if exc.code == "upstream_error" and exc.status != 502:  # the LLM refused the request: the caller's to fix
                data.update(status=exc.status, details=exc.details)
            if "Retry-After" in exc.headers:  # a budget or rate limit refused the call: when to try again
                data["retry_after"] = int(exc.headers["Retry-After"])
            yield [self.event("error", data)]
        except Exception as exc:  # a boundary: the stream must end with an event the client understands
            failure = exc
            logger.exception("The agent loop failed")
            yield [self.event("error", {"code": "internal_error",
                                        "message": f"The agent failed: {type(exc).__name__}."})]
        except BaseException as exc:  # closed or cancelled before the end
            failure = exc
            raise
        finally:
            if self.span is not None:
                _agent_span_end(self.span, self.transcript, failure)

    async def _rounds(self) -> AsyncGenerator[list[AgentEvent], None]:
        routed = self.provider or routed_provider(self.settings)
        caller = self.caller
        if caller is not None and self.settings.agent and not caller.agent:  # usage is recorded with the agent
            caller = dataclasses.replace(caller, agent=self.settings.agent)
        provider = metered(routed, caller)
        with tracing.current(self.span):  # no yield inside: the context sources' and tool listings' spans are its
            if self.prepared is not None:  # asked already, in the caller's database call (prepare_now)
                conversation = self._with_system(self.prepared.blocks)
                listed = self.prepared.tools if self.use_tools else []
            else:  # together: each waits on the database (or an MCP server), neither needs the other
                conversation, listed = await asyncio.gather(self._conversation(), self._tools())
            tools = {tool.name: tool for tool in listed}
        specs = [tool.spec() for tool in tools.values()]
        for round_index in range(self.max_rounds + 1):
            last = round_index == self.max_rounds
            request = ChatRequest(conversation + self.transcript.messages, specs, model_settings(self.settings),
                                  tool_choice="none" if last and specs else None)
            turn = _Turn()
            async with aclosing(self._stream_turn(provider, request, turn, announce_calls=not last)) as batches:
                async for batch in batches:
                    yield batch
            attempts = getattr(routed, "attempts", None)  # a RoutedProvider's: who answered this round
            self.transcript.answered = getattr(attempts, "answered", None) or self.transcript.answered
            self.transcript.streaming_calls = []
            if not turn.calls or last:
                yield [self._finish(turn)]
                return
            self.transcript.messages.append(Message("assistant", turn.text, tool_calls=turn.calls))
            async with aclosing(self._run_tools(turn.calls, tools)) as events:
                async for event in events:
                    yield [event]

    async def _stream_turn(self, provider: Provider, request: ChatRequest, turn: _Turn,
                           announce_calls: bool) -> AsyncGenerator[list[AgentEvent], None]:
        """The model's reply as events, in lists of those one read of the upstream brought (Provider.stream_batches)."""
        async with aclosing(provider.stream_batches(request)) as stream:
            while True:
                try:  # each step under the turn's span: the LLM call's span is its child
                    items = await tracing.anext_in(self.span, stream)
                except StopAsyncIteration:
                    break
                events = []
                for item in items:
                    if isinstance(item, TextDelta):
                        text = self._separated(item.text) if not turn.text_parts else item.text
                        turn.text_parts.append(item.text)
                        self.transcript.text_parts.append(text)
                        events.append(self.event("delta", {"content": text}))
                    elif isinstance(item, ToolCallEvent):
                        turn.calls.append(item.call)
                        if announce_calls:
                            call = item.call
                            self.transcript.streaming_calls.append(call)
                            events.append(self.event("tool_call", {"id": call.id, "name": call.name,
                                                                   "arguments": call.arguments}))
                    elif isinstance(item, Usage):
                        self.transcript.usage += item
                    elif isinstance(item, Finish):
                        turn.finish_reason = item.reason
                if events:
                    yield events

    def _separated(self, text: str) -> str:
        # A later round's text would run on from the last round's ("Let me look.The page says"): the
        # stream, and with it `done.content`, gets a paragraph break; each round's stored message does not.
        previous = self.transcript.text_parts[-1] if self.transcript.text_parts else ""
        return "\n\n" + text if previous and not previous[-1].isspace() and not text[:1].isspace() else text

    def _finish(self, turn: _Turn) -> AgentEvent:
        # Calls the model still asks for after the last round are not run; the reply is stored without them,
        # as a provider rejects history with tool calls that have no results.
        reason = "max_rounds" if turn.calls else turn.finish_reason
        self.transcript.finish_reason = reason
        self.transcript.messages.append(Message("assistant", turn.text))
        return self.event("done", {"content": self.transcript.text, "finish_reason": reason,
                                   "usage": self.transcript.usage.as_dict(), "sources": self.transcript.sources})

    async def _run_tools(self, calls: list[ToolCall], tools: dict[str, Tool]) -> AsyncGenerator[AgentEvent, None]:
        """Run the round's calls concurrently, report each as it finishes (and what a call reports while it runs,
        as `tool_progress`), store the results in call order."""
        told: asyncio.Queue[tuple[str, ToolCall, Any]] = asyncio.Queue()
        with tracing.current(self.span):  # the tasks copy the context: their spans are the turn's children
            tasks = [asyncio.create_task(self._run_tool(call, tools, told)) for call in calls]
        results: dict[str, ToolResult] = {}
        try:
            while len(results) < len(calls):
                kind, call, what = await told.get()
                if kind == "progress":
                    if call.id not in results:
                        yield self.event("tool_progress", {"id": call.id, "name": call.name, "content": what})
                    continue
                if kind == "failed":
                    raise what
                results[call.id] = self.transcript.results[call.id] = what
                yield self.event("tool_result", {"id": call.id, "name": call.name, "content": what.text,
                                                 "is_error": what.is_error}, what)
        finally:
            for task in tasks:  # an interrupted stream leaves no tool running behind it
                task.cancel()
        for call in calls:
            result = results[call.id]
            self.transcript.messages.append(Message("tool", parts_from_tool_content(result.content),
                                                    tool_call_id=call.id, name=call.name, is_error=result.is_error))

    async def _run_tool(self, call: ToolCall, tools: dict[str, Tool],
                        told: asyncio.Queue[tuple[str, ToolCall, Any]]) -> None:
        """Run one call in its own task; what it reports and its result (or its failure) go to `told`."""
        listen_progress(lambda text: told.put_nowait(("progress", call, text)))
        started = time.monotonic()
        try:
            result = await self._traced_tool_result(call, tools)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # call_tool turns failures into results: this is a bug, raised in the run
            told.put_nowait(("failed", call, exc))
            raise
        finally:
            self.transcript.durations[call.id] = round((time.monotonic() - started) * 1000)
        told.put_nowait(("result", call, result))

    async def _traced_tool_result(self, call: ToolCall, tools: dict[str, Tool]) -> ToolResult:
        tool = tools.get(call.name)
        if not tracing.ENABLED:
            return await self._tool_result(call, tool, tools)
        with tracing.span(f"execute_tool {call.name}", **_tool_attributes(call, tool)) as span:
            result = await self._tool_result(call, tool, tools)
            tracing.annotate(span, "tool_error" if result.is_error else None, **{
                "agentsite.tool.is_error": result.is_error,
                "gen_ai.tool.call.result": result.text if tracing.CAPTURE_CONTENT else None})
            return result

    async def _tool_result(self, call: ToolCall, tool: Tool | None, tools: dict[str, Tool]) -> ToolResult:
        if call.arguments_error:
            return ToolResult.error(call.arguments_error)
        if tool is None:
            offered = ", ".join(tools) or "none"
            return ToolResult.error(f"There is no tool named {call.name!r} here (tools: {offered}).")
        return await call_tool(tool, call.arguments, self.ctx)

    async def _tools(self) -> list[Tool]:
        if not self.use_tools or not self.settings.tools:  # an empty allowlist: nothing to list (nor connect to)
            return []
        self.ctx = await resolve_caller(self.ctx)  # the calls then run for the caller they were listed for
        return await registry.list_tools(self.ctx, self.settings)

    async def _conversation(self) -> list[Message]:
        """The system prompt (with the context sources' reference material) followed by the messages."""
        return self._with_system(await self._context_blocks())

    def _with_system(self, blocks: list[ContextBlock]) -> list[Message]:
        self.transcript.sources = [source for block in blocks for source in block.sources]
        system = "\n\n".join(text for text in (self.settings.system_prompt.strip(), format_reference(blocks)) if text)
        return ([Message("system", system)] if system else []) + list(self.messages)

    async def _context_blocks(self) -> list[ContextBlock]:
        query = _latest_user_text(self.messages)
        sources = context_sources()
        if not query.strip() or not sources:
            return []
        request = ContextRequest(self.ctx.user_id, query, self.settings)
        blocks = await asyncio.gather(*(_context_block(name, source, request) for name, source in sources.items()))
        return [block for block in blocks if block is not None]


async def _context_block(name: str, source: Any, request: ContextRequest) -> ContextBlock | None:
    try:
        async with asyncio.timeout(CONTEXT_TIMEOUT):
            return await source(request)
    except asyncio.CancelledError:
        raise
    except Exception:  # a boundary: a broken knowledge base must not break the chat
        logger.exception("Context source %r failed", name)
        return None


def _agent_span(settings: AgentSettings) -> Any:
    """The turn's span (GenAI semantic conventions, `invoke_agent`); None when tracing is off."""
    if not tracing.ENABLED:
        return None
    return tracing.start("invoke_agent", "internal", **{"gen_ai.operation.name": "invoke_agent",
                                                        "gen_ai.request.model": settings.model or None})


def _agent_span_end(span: Any, transcript: Transcript, failure: BaseException | str | None) -> None:
    usage = transcript.usage
    tracing.end(span, failure, **{
        "gen_ai.usage.input_tokens": usage.prompt_tokens, "gen_ai.usage.output_tokens": usage.completion_tokens,
        "gen_ai.response.finish_reasons": [transcript.finish_reason] if transcript.finish_reason else None,
        "agentsite.agent.tool_calls": len(transcript.results),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "content": transcript.text}], ensure_ascii=False)
        if tracing.CAPTURE_CONTENT and failure is None else None})


def _tool_attributes(call: ToolCall, tool: Tool | None) -> dict[str, Any]:
    """An `execute_tool` span's attributes: the arguments only with AGENTSITE_OTEL_CAPTURE_CONTENT=1."""
    return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.name, "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
            "agentsite.tool.source": tool.source if tool is not None else None,
            "agentsite.tool.server": getattr(tool, "server", None) or None,  # an MCP server's tool: its server
            "gen_ai.tool.call.arguments": json.dumps(call.arguments, ensure_ascii=False, default=str)
            if tracing.CAPTURE_CONTENT else None}


@dataclass
class _Turn:
    text_parts: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str = "stop"

    @property
    def text(self) -> str:
        return "".join(self.text_parts)


__all__ = ["MAX_ROUNDS", "AgentEvent", "Prepared", "Transcript", "model_settings", "prepare_now", "run_agent",
           "run_agent_batches"]

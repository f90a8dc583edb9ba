"""The offline stand-in: a deterministic local "model" for demos and tests with no network.

It answers from the knowledge-base context in its system prompt; runs a tool when the latest message asks
for it explicitly (`/tool web_fetch {"url": "https://example.com"}`); reports what a tool returned; and
otherwise says plainly that no LLM is configured, echoing the message. Replies stream in several deltas.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from agentsite.agent.context import reference_in
from agentsite.agent.providers.base import Provider
from agentsite.agent.types import (
    ChatRequest,
    Finish,
    Message,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    Usage,
)

_TOOL_COMMAND = re.compile(r"^\s*/tool\s+(?P<name>[\w.-]+)\s*(?P<args>.*)$", re.DOTALL)
_WORDS = re.compile(r"\S+\s*|\s+")
WORDS_PER_DELTA = 3
MAX_QUOTE_CHARS = 1500


@dataclass
class _Answer:
    text: str
    call: ToolCall | None = None


class OfflineProvider(Provider):
    name = "offline"
    label = "Offline (no LLM)"
    needs_key = False
    needs_url = False
    default_model = "offline"

    async def list_models(self) -> list[str]:
        return [self.default_model]

    async def stream(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        answer = _answer(request)
        pieces = _WORDS.findall(answer.text)
        limit = request.settings.max_tokens
        truncated = limit is not None and len(pieces) > limit
        pieces = pieces[:limit] if truncated else pieces
        for start in range(0, len(pieces), WORDS_PER_DELTA):
            yield TextDelta("".join(pieces[start:start + WORDS_PER_DELTA]))
            await asyncio.sleep(0)  # a real stream gives the loop a turn between deltas; so does this one
        if answer.call and not truncated:
            yield ToolCallEvent(answer.call)
        yield Usage(_token_estimate(request.messages), len(pieces))
        yield Finish("length" if truncated else "tool_calls" if answer.call else "stop")


def _answer(request: ChatRequest) -> _Answer:
    if not request.messages:
        return _Answer("No LLM is configured, and there was no message to answer.")
    last = request.messages[-1]
    if last.role == "tool":
        return _Answer(_tool_report(request.messages))
    command = _TOOL_COMMAND.match(last.text) if last.role == "user" else None
    if command:
        return _tool_answer(request, command["name"], command["args"].strip())
    system = "\n".join(message.text for message in request.messages if message.role == "system")
    reference = reference_in(system)
    if reference:
        quote = reference if len(reference) <= MAX_QUOTE_CHARS else reference[:MAX_QUOTE_CHARS] + " ..."
        return _Answer(f"No LLM is configured, so here is what the knowledge base holds on this:\n\n{quote}")
    return _Answer(_echo(last))


def _echo(message: Message) -> str:
    images = len(message.images)
    attached = f" ({images} image{'s' if images != 1 else ''} attached)" if images else ""
    return ("No LLM is configured, so this is the offline stand-in answering: it can run a tool when asked with "
            f'/tool <name> {{"arg": ...}}, and quote the knowledge base. You said{attached}: {message.text}')


def _tool_answer(request: ChatRequest, name: str, raw: str) -> _Answer:
    offered = [tool.name for tool in request.tools]
    if name not in offered or request.tool_choice == "none":
        available = ", ".join(offered) if offered and request.tool_choice != "none" else "none"
        return _Answer(f"The tool {name} is not available here (tools available: {available}).")
    seed = f"{len(request.messages)}:{name}:{raw}".encode()
    call = ToolCall.parsed(f"call_{hashlib.sha256(seed).hexdigest()[:16]}", name, raw)
    if call.arguments_error:  # explained rather than run: the stand-in's user typed the JSON by hand
        return _Answer(f"The arguments after /tool {name} must be a JSON object. {call.arguments_error}")
    return _Answer(f"Running the tool {name}.", call)


def _tool_report(messages: list[Message]) -> str:
    results: list[Message] = []
    for message in reversed(messages):
        if message.role != "tool":
            break
        results.insert(0, message)
    reports = []
    for result in results:
        text = result.text.strip() or "(no text)"
        if len(text) > MAX_QUOTE_CHARS:
            text = text[:MAX_QUOTE_CHARS] + " ..."
        verb = "failed" if result.is_error else "returned"
        reports.append(f"The tool {result.name or 'tool'} {verb}:\n\n{text}")
    return "\n\n".join(reports)


def _token_estimate(messages: list[Message]) -> int:
    # About four characters a token, the usual rule of thumb; the offline model has no tokenizer.
    return sum(len(message.text) for message in messages) // 4 + len(messages)

"""The /v1 engine: which model a request names, the runtime stream behind it, and that stream as OpenAI objects.

A request for the configured provider's model is translated and passed through (the client's own tools
included); a request for `agent` runs the agent loop, whose own tool calls stay inside the server. Either
way the engine works on the runtime's provider-neutral stream events (TextDelta, ToolCallEvent, Usage,
Finish) and renders them as a chat.completion object or as chat.completion.chunk events. The views in
`compat.api` parse, authenticate and call these; nothing here reads a request.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from functools import cached_property
from typing import TYPE_CHECKING, Any

from agentsite.agent.config import AgentSettings
from agentsite.agent.model_sources import model_source_for, model_sources
from agentsite.agent.providers import collect, uncarried_fields
from agentsite.agent.providers.base import one_per_list
from agentsite.agent.routing import RoutedProvider, catalogue_entries, resolve
from agentsite.agent.types import ChatRequest, Finish, StreamEvent, TextDelta, ToolCallEvent, Usage
from agentsite.agent.types import Completion as Reply
from agentsite.agent.usage import Caller, metered
from agentsite.core.errors import AppError, openai_envelope, openai_error
from agentsite.core.sse import json_text, sse_event
from compat import translate
from compat.schemas import ChatCompletionRequest, EmbeddingRequest, ModelCard, ModelList

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

logger = logging.getLogger(__name__)

AGENT_MODEL = "agent"
EMBEDDING_MODEL = "hash-256"
MODEL_CREATED = 1767225600  # 2026-01-01: a fixed date, so the model list is stable between calls


UPSTREAM_HEADER = "X-Agentsite-Upstream"
USAGE_HEADER = "X-Agentsite-Usage"  # `estimated` on a whole reply whose usage agentsite estimated
ATTEMPTS_HEADER = "X-Agentsite-Attempts"


def model_ids(settings: AgentSettings) -> list[str]:
    """The models /v1 serves: the catalogue's aliases and entries (agentsite.agent.routing), the agent, and the
    embedding model."""
    names = [entry.name for entry in catalogue_entries(settings) if entry.state != "discovery_failed"]
    return [*names, AGENT_MODEL, EMBEDDING_MODEL]


async def model_list(settings: AgentSettings, user: AbstractBaseUser | None) -> dict[str, Any]:
    """The models, with those that facets answer for this caller (their workflows) when they are known."""
    user_id = getattr(user, "pk", None)
    extra = [name for source in model_sources() for name in await source.list_models(user_id)]
    data = [ModelCard(id=model_id, created=MODEL_CREATED, owned_by="agentsite")
            for model_id in [*model_ids(settings), *extra]]
    return ModelList(data=data).model_dump()


class Completion:
    """One chat completion request, resolved to its event source. Raises AppError 404 `model_not_found`.

    `request`: the request already in the runtime's types (another door's dialect, translated by that door:
    compat.messages); `body` is then None, and only `reply()` and `batches()` apply (the rest renders OpenAI)."""

    def __init__(self, body: ChatCompletionRequest | None, *, settings: AgentSettings,
                 user: AbstractBaseUser | None, caller: Caller | None = None, request: ChatRequest | None = None,
                 unknown: dict[str, Any] | None = None):
        if request is None:
            assert body is not None
            # raises AppError 400 before anything is sent upstream
            request = translate.to_chat_request(body, body.model, translate.to_messages(body))
            request.passthrough = dict(unknown or {})
        self.request = request
        self.model_name = model_name = request.settings.model
        self.source = model_source_for(model_name)
        # A catalogue model (an alias, `<connection>/<model>`, or a bare model of the default connection) goes
        # through the router: fallback and balance apply, and `provider.attempts` says who answered.
        self.provider: RoutedProvider | None = None
        if model_name != AGENT_MODEL and self.source is None:
            self.provider = RoutedProvider(resolve(model_name, settings))  # 404 model_not_found
        self.body = body
        self.settings = settings
        self.user = user
        self.caller = caller or Caller(getattr(user, "pk", None), facet="v1")
        self.messages = request.messages
        self.usage_estimated = False  # reply()'s usage was estimated (a stream says so in its usage instead)
        self.agent_answered = ""  # `agent`: the catalogue entry that answered its last round (a whole reply's)
        self.refuse_uncarried()

    # A door whose fields have other names than the runtime's (Responses' `text.format`) names them here.
    field_names: dict[str, str] = {}

    def refuse_uncarried(self) -> None:
        """AppError 400 `unsupported_parameter` naming the first request field the model cannot honour: one that
        the wire format of any upstream the route may try cannot carry, or, for a model answered inside the
        server (the agent, a workflow), any of the extra fields and structured output (`n: 1` aside)."""
        request = self.request
        self.refuse_unknown()
        if self.provider is None:
            names = sorted(name for name, value in request.extra.items() if not (name == "n" and value == 1))
            if request.response_format is not None:
                names = sorted([*names, "response_format"])
            if names:
                self._refuse(names[0], f"the model {self.model_name!r} runs inside this server, which cannot "
                             "honour it; send it to a catalogue model.")
            return
        for target in self.provider.route.targets:
            names = uncarried_fields(target.connection.provider, request)
            if names:
                self._refuse(names[0], f"the {target.connection.provider} upstream of {target.entry} cannot "
                             "carry it (docs/api.md, /v1: fields per upstream).")

    def refuse_unknown(self) -> None:
        """AppError 400 `unknown_field` naming the first field no door knows, unless every upstream the route may
        try is a connection with `passthrough` (which gets it as it came)."""
        if not self.request.passthrough:
            return
        targets = self.provider.route.targets if self.provider is not None else ()
        if not targets or not all(target.connection.passthrough for target in targets):
            name = sorted(self.request.passthrough)[0]
            why = ("this server does not know this field; a connection with passthrough: true sends such fields "
                   "to its upstream as they came (docs/api.md, /v1: fields per upstream).")
            raise AppError("unknown_field", f"{name}: {why}", 400, {name: [why]})

    def _refuse(self, name: str, why: str) -> None:
        param = self.field_names.get(name, name)
        raise AppError("unsupported_parameter", f"{param}: {why}", 400, {param: [why]})

    @cached_property
    def cid(self) -> str:
        """The chat.completion id, made when first asked for (the other doors' runs have ids of their own)."""
        return translate.completion_id()

    @property
    def is_agent(self) -> bool:
        return self.model_name == AGENT_MODEL

    @property
    def model(self) -> str:
        """The completion's `model`: the catalogue entry that answered when the request named an alias, else
        the name the request used."""
        provider = self.provider
        if provider is not None and provider.route.alias and provider.attempts.answered:
            return provider.attempts.answered
        return self.model_name

    def headers(self) -> dict[str, str]:
        """X-Agentsite-Upstream: the entry that answered; X-Agentsite-Attempts: each try (when any failed);
        X-Agentsite-Usage: `estimated` when a whole reply's usage was (a stream's headers leave before its usage
        is known: its usage object carries `estimated: true` instead)."""
        provider = self.provider
        usage = {USAGE_HEADER: "estimated"} if self.usage_estimated else {}
        if provider is None and self.agent_answered:  # `agent`: its model's entry (a whole reply; a stream's
            return {UPSTREAM_HEADER: self.agent_answered, **usage}  # headers leave before its first round ends)
        if provider is None or not provider.attempts.answered:
            return usage
        headers = {UPSTREAM_HEADER: provider.attempts.answered, **usage}
        if len(provider.attempts.tries) > 1:
            headers[ATTEMPTS_HEADER] = provider.attempts.summary()
        return headers

    def _answered_here(self) -> AsyncIterator[StreamEvent]:
        """The events of a model answered inside the server: the agent, or a facet's (a workflow)."""
        if self.source is not None:
            return self.source.stream(self.model_name, self.messages, getattr(self.user, "pk", None),
                                      caller=self.caller)
        return agent_events(self.request, user=self.user, settings=self.settings, caller=self.caller,
                            on_answered=self._agent_answered)

    def _agent_answered(self, entry: str) -> None:
        self.agent_answered = entry

    def batches(self) -> AsyncIterator[list[StreamEvent]]:
        """The stream's events in lists of those that were ready together (Provider.stream_batches)."""
        if self.provider is None:
            return one_per_list(self._answered_here())
        return metered(self.provider, self.caller).stream_batches(self.request)

    async def reply(self) -> Reply:
        """The whole reply in the runtime's terms. A provider's model asks the upstream for plain JSON: cheaper
        than folding a stream."""
        if self.provider is None:
            reply = await collect(self._answered_here())
        else:
            reply = await metered(self.provider, self.caller).complete(self.request)
        self.usage_estimated = reply.usage.estimated
        return reply

    async def result(self) -> dict[str, Any]:
        """The chat.completion object."""
        reply = await self.reply()
        return translate.completion_object(cid=self.cid, model=self.model, text=reply.text,
                                           tool_calls=reply.tool_calls,
                                           finish_reason=translate.finish_reason_out(reply.finish_reason),
                                           usage=reply.usage.as_dict(), logprobs=reply.logprobs)

    async def opened(self) -> tuple[list[StreamEvent], AsyncIterator[list[StreamEvent]]]:
        """The stream, opened: (its first list, the rest). Returns once the upstream has answered with a success
        status (the first list then empty: nothing is ready yet, Provider.stream_batches) or sent its first
        events, so a door starts its reply while the model thinks; an upstream that cannot be reached or
        answers with an error status raises the AppError here, a proper HTTP error (502; 429 for a budget), not
        an error event after a 200. The agent and workflows open with their first event."""
        batches = self.batches()
        try:
            first: list[StreamEvent] = await anext(batches)
        except StopAsyncIteration:
            first = []
        return first, batches

    async def chunks(self) -> AsyncIterator[bytes]:
        """The stream's SSE bytes, opened (see opened()). Events that were ready together leave in one piece of
        bytes."""
        first, batches = await self.opened()
        options = self.body.stream_options if self.body is not None else None
        return _chunks(first, batches, cid=self.cid, model=self.model,
                       include_usage=bool(options and options.include_usage))


async def agent_events(request: ChatRequest, *, user: AbstractBaseUser | None, settings: AgentSettings,
                       caller: Caller | None = None,
                       on_answered: Callable[[str], None] | None = None) -> AsyncIterator[StreamEvent]:
    """The agent loop as stream events: its text, then its summed usage and finish. An `error` event is raised
    as the AppError it reports (502 unless it says otherwise). The request's tools are not the agent's: its
    own tools run inside the server."""
    from agentsite.agent.loop import run_agent

    messages = request.messages
    overrides = {key: value for key, value in (("temperature", request.settings.temperature),
                 ("max_tokens", request.settings.max_tokens)) if value is not None}
    user_id = getattr(user, "pk", None)
    # Tools act on the host (fetch, screenshot, MCP servers): only an identified caller gets them.
    # The caller as the request authenticated them: an API key without the admin scope is no admin here.
    is_admin = None if user is None else bool(user.is_active and getattr(user, "is_staff", False))
    async for event in run_agent(messages=messages, user_id=user_id, use_tools=user_id is not None, caller=caller,
                                 settings=settings.with_overrides(**overrides) if overrides else settings,
                                 is_admin=is_admin):
        if event.type == "delta":
            yield TextDelta(event.data.get("content", ""))
        elif event.type == "done" and event.transcript is not None:
            if on_answered is not None and event.transcript.answered:
                on_answered(event.transcript.answered)
            yield event.transcript.usage
            yield Finish(event.transcript.finish_reason or "stop")
        elif event.type == "error":
            code = event.data.get("code", "upstream_error")
            if code in ("budget_exceeded", "rate_limited"):  # refused before the model was asked
                retry = str(event.data.get("retry_after", 1))
                raise AppError(code, event.data.get("message", ""), 429, {"retry_after": int(retry)},
                               headers={"Retry-After": retry})
            # An LLM's refusal (the prompt is over its context) keeps its 4xx; every other failure is a 502.
            status = event.data.get("status", 502) if code == "upstream_error" else 502
            raise AppError(code, event.data.get("message", ""), status, event.data.get("details"))


_SPLIT = "\x00split\x00"
_SPLIT_JSON = json.dumps(_SPLIT).encode()


async def _chunks(first: list[StreamEvent], batches: AsyncIterator[list[StreamEvent]], *, cid: str, model: str,
                  include_usage: bool) -> AsyncIterator[bytes]:
    """chat.completion.chunk events for `first` and then each batch, then [DONE]; the events of one batch as
    one piece of bytes. A client hang-up cancels this and, with it, the upstream (closed on the way out)."""
    created = int(time.time())

    def chunk(**fields: Any) -> bytes:
        return sse_event(translate.chunk_object(cid=cid, created=created, model=model, **fields))

    # A text delta is most of a stream's chunks: its bytes are this stream's one template around the text,
    # byte for byte what chunk(delta={"content": text}) gives, without building and encoding the object.
    head, tail = chunk(delta={"content": _SPLIT}).split(_SPLIT_JSON)

    out = [chunk(delta={"role": "assistant", "content": ""})]
    usage = Usage()
    finish = "stop"
    tool_index = 0

    def render(batch: list[StreamEvent]) -> None:
        nonlocal usage, finish, tool_index
        for event in batch:
            if isinstance(event, TextDelta) and event.text:
                if event.logprobs is None:
                    out.append(head + json_text(event.text) + tail)
                else:  # the upstream's log probabilities of these tokens, relayed
                    out.append(chunk(delta={"content": event.text}, logprobs=event.logprobs))
            elif isinstance(event, ToolCallEvent):
                out.append(chunk(delta={"tool_calls": [translate.tool_call_out(event.call, index=tool_index)]}))
                tool_index += 1
            elif isinstance(event, Usage):
                usage = event
            elif isinstance(event, Finish):
                finish = event.reason

    try:
        async with aclosing(batches):
            render(first)
            yield b"".join(out)  # the role chunk and the first events
            out.clear()
            async for batch in batches:
                render(batch)
                if out:
                    yield b"".join(out)
                    out.clear()
    except AppError as exc:  # a started stream ends with an error chunk, which SDKs raise as an APIError
        out.append(sse_event(openai_error(exc)))
        yield b"".join(out)
        return
    except Exception:  # a boundary: never a hanging or broken stream
        logger.exception("The /v1 stream failed")
        out.append(sse_event(openai_envelope("internal_error", "The server failed; the error was logged.", 500)))
        yield b"".join(out)
        return
    out.append(chunk(delta={}, finish_reason=translate.finish_reason_out(finish)))
    if include_usage:
        out.append(chunk(usage=usage.as_dict()))
    out.append(sse_event("[DONE]"))
    yield b"".join(out)


def embeddings(body: EmbeddingRequest) -> dict[str, Any]:
    """The knowledge base's own vectors for the inputs (1 to 2048 of them: EmbeddingRequest enforces it). Raises
    AppError 404 `model_not_found`."""
    from knowledge.embedding import embed_many, tokenize

    if body.model != EMBEDDING_MODEL:
        raise AppError("model_not_found", f"The embedding model {body.model!r} does not exist; use "
                       f"{EMBEDDING_MODEL!r}.", 404)
    texts = [body.input] if isinstance(body.input, str) else list(body.input)
    data = []
    for index, vector in enumerate(embed_many(texts)):
        embedding: Any = (base64.b64encode(vector.astype("<f4").tobytes()).decode()
                          if body.encoding_format == "base64" else [float(x) for x in vector])
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    tokens = sum(len(tokenize(text)) for text in texts)
    return {"object": "list", "data": data, "model": EMBEDDING_MODEL,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

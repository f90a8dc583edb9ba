"""The dialect-neutral run of every /v1 door: which model a request names, the runtime's stream behind it, and
the checks made before anything is sent.

A door translates its dialect into the runtime's ChatRequest and hands it to a `Run`. A catalogue model goes
through the router (fallback, balance, metering) with the client's own tools; `agent` runs the agent loop, whose
tools stay inside the server; `workflow:*` and other facets' models answer through their model sources. Either
way the door gets the runtime's provider-neutral events (TextDelta, ToolCallEvent, Usage, Finish) and renders them
in its dialect (compat/<dialect>/render.py, through compat.stream).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from agentsite.agent import agents, modelaccess
from agentsite.agent.config import AgentSettings
from agentsite.agent.loop import run_agent
from agentsite.agent.model_sources import model_source_for
from agentsite.agent.providers import collect, uncarried_fields
from agentsite.agent.providers.base import one_per_list
from agentsite.agent.routing import RoutedProvider, catalogue_entries, resolve
from agentsite.agent.types import ChatRequest, Finish, StreamEvent, TextDelta
from agentsite.agent.types import Completion as Reply
from agentsite.agent.usage import Caller, metered
from agentsite.core.errors import AppError

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

logger = logging.getLogger(__name__)

AGENT_MODEL = "agent"
EMBEDDING_MODEL = "hash-256"
MODEL_CREATED = 1767225600  # 2026-01-01: a fixed date, so the model list is stable between calls


UPSTREAM_HEADER = "X-Agentsite-Upstream"
USAGE_HEADER = "X-Agentsite-Usage"  # `estimated` on a whole reply whose usage agentsite estimated
ATTEMPTS_HEADER = "X-Agentsite-Attempts"


def model_ids(settings: AgentSettings, agent_names: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The models /v1 serves: the catalogue's aliases and entries (agentsite.agent.routing), the agent, the named
    agents given (`agent:<slug>`: those the caller may use), and the embedding model."""
    names = [entry.name for entry in catalogue_entries(settings) if entry.state != "discovery_failed"]
    return [*names, AGENT_MODEL, *agent_names, EMBEDDING_MODEL]


class Run:
    """One request of any door, in the runtime's types, resolved to its event source. Raises AppError 404
    `model_not_found`, and 400 naming a field the model cannot carry, before anything is sent; 403
    `model_not_allowed` (agentsite.agent.modelaccess) when opened or replied, before anything is sent."""

    def __init__(self, request: ChatRequest, *, settings: AgentSettings, user: AbstractBaseUser | None,
                 caller: Caller | None = None):
        self.request = request
        self.model_name = model_name = request.settings.model
        self.source = model_source_for(model_name)
        # `agent` and `agent:<slug>[@<n>]`: a named agent, resolved for this caller when the run is allowed
        # (agentsite.agent.agents; 404 `model_not_found` when the caller may not use it).
        self.agent: agents.ResolvedAgent | None = None
        # A catalogue model (an alias, `<connection>/<model>`, or a bare model of the default connection) goes
        # through the router: fallback and balance apply, and `provider.attempts` says who answered.
        self.provider: RoutedProvider | None = None
        if not self.is_agent and self.source is None:
            self.provider = RoutedProvider(resolve(model_name, settings))  # 404 model_not_found
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

    @property
    def is_agent(self) -> bool:
        return agents.is_agent_model(self.model_name)

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

    async def allow(self) -> None:
        """AppError 403 `model_not_allowed` when the caller may not use the model the request names. A catalogue
        model's call is also checked where every LLM call is (MeteredProvider); an agent and a facet's model
        are checked here by their own names (what they call inside is checked there too). An agent is resolved
        here first: 404 `model_not_found` when the caller may not use it (its access rule), as when none exists."""
        if self.provider is not None:
            await modelaccess.require_route(self.caller, self.provider.route)
            return
        if self.is_agent:
            self.agent = await agents.aresolve(self.user, self.model_name)
            self.settings = self.agent.settings
        names = agents.access_names(self.model_name) if self.is_agent else (self.model_name,)
        await modelaccess.require(self.caller, names)

    def batches(self) -> AsyncIterator[list[StreamEvent]]:
        """The stream's events in lists of those that were ready together (Provider.stream_batches)."""
        if self.provider is None:
            return one_per_list(self._answered_here())
        return metered(self.provider, self.caller).stream_batches(self.request)

    async def reply(self) -> Reply:
        """The whole reply in the runtime's terms. A provider's model asks the upstream for plain JSON: cheaper
        than folding a stream."""
        if self.provider is None:
            await self.allow()
            reply = await collect(self._answered_here())
        else:
            reply = await metered(self.provider, self.caller).complete(self.request)
        self.usage_estimated = reply.usage.estimated
        return reply

    async def opened(self) -> tuple[list[StreamEvent], AsyncIterator[list[StreamEvent]]]:
        """The stream, opened: (its first list, the rest). Returns once the upstream has answered with a success
        status (the first list then empty: nothing is ready yet, Provider.stream_batches) or sent its first
        events, so a door starts its reply while the model thinks; an upstream that cannot be reached or
        answers with an error status raises the AppError here, a proper HTTP error (502; 429 for a budget), not
        an error event after a 200. The agent and workflows open with their first event."""
        if self.provider is None:  # a catalogue model's first call checks it (MeteredProvider)
            await self.allow()
        batches = self.batches()
        try:
            first: list[StreamEvent] = await anext(batches)
        except StopAsyncIteration:
            first = []
        return first, batches


async def agent_events(request: ChatRequest, *, user: AbstractBaseUser | None, settings: AgentSettings,
                       caller: Caller | None = None,
                       on_answered: Callable[[str], None] | None = None) -> AsyncIterator[StreamEvent]:
    """The agent loop as stream events: its text, then its summed usage and finish. An `error` event is raised
    as the AppError it reports (502 unless it says otherwise). The request's tools are not the agent's: its
    own tools run inside the server."""
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
            if code == "model_not_allowed":  # the agent's model is not one the caller's groups allow
                raise AppError(code, event.data.get("message", ""), 403)
            if code in ("budget_exceeded", "rate_limited"):  # refused before the model was asked
                retry = str(event.data.get("retry_after", 1))
                raise AppError(code, event.data.get("message", ""), 429, {"retry_after": int(retry)},
                               headers={"Retry-After": retry})
            # An LLM's refusal (the prompt is over its context) keeps its 4xx; every other failure is a 502.
            status = event.data.get("status", 502) if code == "upstream_error" else 502
            raise AppError(code, event.data.get("message", ""), status, event.data.get("details"))

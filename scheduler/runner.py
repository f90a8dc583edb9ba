"""What a scheduled run does: the runner is injected (setting AGENTSITE_SCHEDULER_RUNNER, a dotted path to an
async callable), and defaults to `agent_runner` below.

A runner is `async def runner(*, task, scheduled_for) -> str`: it returns the run's output text and raises
(anything) for an error. `scheduled_for` is the occurrence the run belongs to (UTC; a manual run's is when it
was asked for), so a runner or a tool can use `(task.id, scheduled_for)` as an idempotency key. The run's
time limit (AGENTSITE_SCHEDULER_RUN_TIMEOUT_S) is enforced around the runner, not by it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from agents_app.models import Agent
from agentsite.agent.config import AgentSettings, aget_settings
from agentsite.agent.loop import run_agent
from agentsite.agent.types import Message
from agentsite.agent.usage import caller_for, calling
from agentsite.core.dbcall import db
from agentsite.core.errors import AppError
from sessions_app import agents
from sessions_app.turns import turn_start
from workflows import runs

DEFAULT_RUNNER = "scheduler.runner.agent_runner"


def runner() -> Any:
    return import_string(getattr(settings, "AGENTSITE_SCHEDULER_RUNNER", "") or DEFAULT_RUNNER)


async def agent_runner(*, task: Any, scheduled_for: datetime) -> str:
    """The prompt to the task's agent (`default` when it names none) as the task's owner (the agent's
    instructions, tools and knowledge, with the owner's access checked now) and to the task's `model` (else the
    session's, else the agent's); with a workflow, that workflow with the prompt as its input; with a session,
    the prompt and reply appended to it as a turn (of the task's agent). An agent the owner may no longer use
    fails the run (AppError 404 `not_found`, its message naming the agent)."""

    # The run's every model call counts to the owner, or to the task's key when the run says so (scheduler.tasks).
    with calling(caller_for(task.owner_id, "scheduler")):
        if task.workflow_id:
            return await _workflow(task)
        if task.session_id:
            return await _session_turn(task)
        return await _agent(task)


async def _agent_slug(task: Any) -> str | None:
    """The slug of the agent the task names (None: none, the agent `default`); read now when not loaded with it."""
    if task.agent_id is None:
        return None
    if type(task).agent.is_cached(task) and task.agent is not None:
        return str(task.agent.slug)

    slug = await db(lambda: Agent.objects.filter(pk=task.agent_id).values_list("slug", flat=True).first())
    return slug


def agent_gone(slug: str) -> AppError:
    return agents.unavailable(slug, f"The task's agent {slug!r} is no longer available to its owner; choose "
                              "another (PATCH /api/scheduler/tasks/:id {\"agent\": ...}).")


async def _agent_settings(task: Any) -> AgentSettings | None:
    """The settings of the task's agent for its owner (None: it names none, the runtime's default settings)."""
    slug = await _agent_slug(task)
    if slug is None:
        return None
    try:
        return await db(agents.settings_now, task.owner, slug)
    except AppError as exc:
        if exc.code == "not_found":
            raise agent_gone(slug) from None
        raise


async def _agent(task: Any) -> str:
    settings = await _agent_settings(task)
    if task.model:
        settings = (settings or await aget_settings()).with_overrides(model=task.model)
    async for event in run_agent(messages=[Message("user", task.prompt)], user_id=task.owner_id, settings=settings):
        if event.type == "error":
            raise model_failure(event.data)
        if event.type == "done":
            return event.data.get("content", "")
    raise AppError("internal_error", "The agent stopped without an answer.", 500)


async def _session_turn(task: Any) -> str:
    # The task's agent, not the session's: the task says which agent its prompt goes to (`default` when none).
    slug = await _agent_slug(task) or agents.DEFAULT_AGENT
    try:
        turn = await turn_start(owner=task.owner, session_id=task.session_id, message=task.prompt,
                                model=task.model or None, agent=slug)
    except AppError as exc:
        if exc.code == "not_found" and "agent" in (exc.details or {}):
            raise agent_gone(slug) from None
        raise
    async for event in turn.events():
        if event.type == "error":
            raise model_failure(event.data)
    return turn.transcript.text


def model_failure(data: dict[str, Any]) -> AppError:
    """The agent's `error` event as the run's error, its message naming the code (the run stores the message):
    `model_not_allowed` when the task's owner (or key) may not use the task's model."""
    code = data.get("code", "upstream_error")
    return AppError(code, f"The model failed ({code}): {data.get('message', '')}", 403 if code == "model_not_allowed"
                    else 502)


async def _workflow(task: Any) -> str:
    # The run stops itself a little before the scheduled run's own limit cuts it off, so it is stored `error`
    # saying it ran out of time, not `cancelled` as if a client had hung up.
    limit = float(getattr(settings, "AGENTSITE_SCHEDULER_RUN_TIMEOUT_S", 300.0))
    record = await runs.workflow_run_start(owner_id=task.owner_id, workflow_id=task.workflow_id, input_text=task.prompt,
                                           time_limit=limit - min(1.0, limit / 10), version=task.workflow_version)
    return runs.run_reply(record)

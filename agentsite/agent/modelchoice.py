"""Checking a model name someone chose (a chat session's, a workflow `llm` node's, a scheduled task's) against
the model catalogue (agentsite.agent.routing) when it is saved, so that a typo is refused with a 400 naming it
rather than failing each run later.

An empty name is always valid: it means the agent's default model (config `model`). A name is valid when the
catalogue resolves it (an alias with an enabled target, `<connection>/<model>` of an enabled connection, or a
bare model of the default connection); a name that later stops resolving (its connection disabled or deleted)
makes the runs that use it fail with 404 `model_not_found` naming it.
"""

from __future__ import annotations

from agentsite.agent.config import AgentSettings, get_settings
from agentsite.agent.routing import resolve
from agentsite.core.errors import AppError

MAX_MODEL_CHARS = 300


def model_problem(name: str, settings: AgentSettings | None = None) -> str | None:
    """Why `name` cannot be used as a model (a sentence naming it), or None when it can (sync: may read the
    settings)."""

    if not name:
        return None
    if len(name) > MAX_MODEL_CHARS:
        return f"A model name has at most {MAX_MODEL_CHARS} characters."
    try:
        resolve(name, settings or get_settings())
    except AppError:
        return f"The model {name!r} is not in the model catalogue (GET /api/models lists the models)."
    return None


def model_checked(name: str, field: str = "model", settings: AgentSettings | None = None) -> str:
    """`name` stripped, or AppError 400 `invalid` whose details name `field` and whose message names the model."""
    name = (name or "").strip()
    problem = model_problem(name, settings)
    if problem:
        raise AppError("invalid", f"{field}: {problem}", 400, {field: [problem]})
    return name

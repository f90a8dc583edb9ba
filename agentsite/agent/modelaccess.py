"""Model access: which models a caller may use, asked before every LLM call and by the doors that name a model.

The runtime imports no facet app: the one `ModelPolicy` is registered with `set_model_policy()` from an app's
ready() (organisation's: the models of the caller's groups). Without one (runtime tests) every model is allowed.
The policy keeps nothing the invalidation channel does not drop: a change counts from the caller's next call.

The one call site is `MeteredProvider` (agentsite.agent.usage), which wraps every LLM call of every door: it
asks `require_route` for the route the call was resolved to, before the budget is asked. A door that names a
model answered inside the server (/v1's `agent`, `workflow:<name>`, `hash-256`) asks `require` itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from agentsite.core.errors import AppError

if TYPE_CHECKING:
    from agentsite.agent.routing import Route
    from agentsite.agent.usage import Caller

Allowed = Callable[[str], bool]


class ModelPolicy(Protocol):
    """Both methods may read the database (off the event loop) and raise AppError (503 `unavailable`) when they
    cannot decide, which refuses the call: an access rule fails closed."""

    async def allowed(self, caller: Caller) -> Allowed | None:
        """None: the caller's rule allows every model; else a predicate over model names (True: allowed)."""

    async def exempt(self, caller: Caller) -> bool:
        """Whether the caller is held to no rule (an admin): asked only when the rule would refuse something, so
        that an allowed call costs nothing more."""


_policy: ModelPolicy | None = None


def set_model_policy(policy: ModelPolicy | None) -> None:
    global _policy
    _policy = policy


def active() -> bool:
    """Whether a policy is registered (else every model is allowed to everyone)."""
    return _policy is not None


async def _allowed(caller: Caller | None) -> Allowed | None:
    """The caller's predicate (None: every model), as the registered policy answers it, before exemptions."""
    if _policy is None or caller is None:
        return None
    return await _policy.allowed(caller)


async def allowed_names(caller: Caller | None, names: list[str]) -> list[str]:
    """The names the caller may use, in order (a list such as /v1/models)."""
    allowed = await _allowed(caller)
    if allowed is None:
        return names
    kept = [name for name in names if allowed(name)]
    if len(kept) < len(names) and await _exempt(caller):
        return names
    return kept


async def _exempt(caller: Caller | None) -> bool:
    return _policy is not None and caller is not None and await _policy.exempt(caller)


def route_names(route: Route) -> tuple[str, ...]:
    """The names a route answers to, any of which a rule may allow: an alias by its own name only (not its
    targets: which of them answers is the router's choice); a model by the name asked and its catalogue entry
    (`gpt-4o` of the default connection is also `default/gpt-4o`)."""
    if route.alias:
        return (route.name,)
    return tuple(dict.fromkeys((route.name, *(target.entry for target in route.targets))))


async def require(caller: Caller | None, names: tuple[str, ...], shown: str = "") -> None:
    """Raise AppError 403 `model_not_allowed` unless the caller may use one of `names` (the names of one model,
    `shown` in the message: the first by default)."""
    allowed = await _allowed(caller)
    if allowed is None or any(allowed(name) for name in names if name) or await _exempt(caller):
        return
    name = shown or next((name for name in names if name), "")
    raise AppError("model_not_allowed", f"The model {name!r} is not one your groups allow you to use; GET "
                   "/v1/models lists those they do.", 403, {"model": [name]})


async def require_route(caller: Caller | None, route: Route) -> None:
    """require() for a catalogue route (route_names)."""
    await require(caller, route_names(route), route.name)


__all__ = ["Allowed", "ModelPolicy", "active", "allowed_names", "require", "require_route", "route_names",
           "set_model_policy"]

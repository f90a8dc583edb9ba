"""The Metering the runtime calls (agentsite.agent.usage): budgets before a call, the buffer and the budgets after.

Registered in UsageConfig.ready(). What a call without a budget costs on the request's path: a cached budget
lookup, a dict update under a lock (usage.buffer.add), a price lookup in a cached table. Nothing else.

The scopes of a call (`scopes_for`) are fixed at its admission: it is settled against the groups the user was a
member of when it started, even when the membership ends before it does.

A budgeted call is admitted for its worst case: the prompt's estimate plus its `max_tokens` (else
AGENTSITE_BUDGET_DEFAULT_MAX_TOKENS), in tokens and, at the model's price, in cost. Its Ticket carries the hold
that `record` releases, however the call ended; an admission cancelled while its database thread was still
running releases the hold that thread then takes.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from dataclasses import dataclass

from django.conf import settings

from agentsite.agent.usage import Caller, CallRecord
from agentsite.core import invalidation
from agentsite.core.dbcall import db, db_started
from usage import budgets, buffer
from usage.models import ModelPrice

logger = logging.getLogger(__name__)

PRICE_TOPIC = "usage-prices"
PRICE_CACHE_S = 10.0


@dataclass(frozen=True)
class Ticket:
    scopes: list[budgets.Scope]
    hold: budgets.Hold | None = None


class Prices:
    """The price table, cached per process (reloaded every PRICE_CACHE_S seconds, or at once when changed)."""

    def __init__(self) -> None:
        self._table: dict[str, tuple[float, float]] = {}
        self._loaded_at = -1e9
        self._lock = threading.Lock()

    def drop(self, key: str | None = None) -> None:
        self._loaded_at = -1e9

    @property
    def fresh(self) -> bool:
        invalidation.listen()
        return time.monotonic() - self._loaded_at < PRICE_CACHE_S

    def load(self) -> None:
        """Read the table; when the database cannot answer, keep the last one (a call is never failed for its
        price) and try again after PRICE_CACHE_S."""

        try:
            table = {model: (inp, out) for model, inp, out in
                     ModelPrice.objects.values_list("model", "input_per_million", "output_per_million")}
        except Exception as exc:  # a boundary: the price is an annotation of the call, not a condition of it
            logger.warning("The price table could not be read (%s); costs use the last one read", exc)
            table = self._table
        with self._lock:
            self._table, self._loaded_at = table, time.monotonic()

    def cost(self, record: CallRecord) -> float:
        price = self._table.get(record.model_answered) or self._table.get(record.model_requested)
        if price is None:
            return 0.0
        return (record.prompt_tokens * price[0] + record.completion_tokens * price[1]) / 1_000_000

    def worst_cost(self, model: str, prompt_tokens: int, completion_tokens: int) -> float:
        """The cost of a call to `model` of at most these tokens (0 for a model without a price: the model that
        answers is known only after the call)."""
        price = self._table.get(model)
        if price is None:
            return 0.0
        return (prompt_tokens * price[0] + completion_tokens * price[1]) / 1_000_000


prices = Prices()


def changed_prices() -> None:
    invalidation.announce(PRICE_TOPIC, None)


async def scopes_for(caller: Caller) -> list[budgets.Scope]:
    """The budgets that bind this caller: their user's (cached), their key's (carried by the caller), and those of
    the user's groups that have one (cached with the memberships). Nothing cached: one trip to a thread."""
    scopes = []
    groups: tuple[budgets.Scope, ...] = ()
    if caller.user_id is not None:
        limits = budgets.user_budget_peek(caller.user_id)
        peeked = budgets.group_scopes_peek(caller.user_id)
        if limits is None or peeked is None:
            try:
                limits, peeked = await db(_load, caller.user_id, limits, peeked)
            except Exception as exc:  # a boundary: the database away (or a caller with no database at all)
                # The call goes on unbudgeted rather than failing: whatever else it needs of the database
                # (its session, its key) fails it on its own when the database is really gone.
                logger.warning("The budgets of user %s could not be read (%s); this call is not held to them",
                               caller.user_id, exc)
                limits, peeked = {}, ()
        if limits:
            scopes.append(budgets.Scope(f"u:{caller.user_id}", limits))
        groups = peeked or ()
    key_limits = budgets.clean_budget(caller.key_budget) if caller.key_id else {}
    if key_limits:
        scopes.append(budgets.Scope(f"k:{caller.key_id}", key_limits))
    scopes.extend(groups)
    return scopes


def _load(user_id: int, limits: dict[str, float] | None, groups: tuple[budgets.Scope, ...] | None,
          ) -> tuple[dict[str, float], tuple[budgets.Scope, ...]]:
    """What was not cached of the user's budgets and their groups'."""
    return (budgets.user_budget_load(user_id) if limits is None else limits,
            budgets.group_scopes_load(user_id) if groups is None else groups)


def warm_budgets(user_id: int) -> None:
    """Read what `scopes_for` would read of the user's budgets and their groups' (nothing that is cached): run
    with the user's own read (agentsite.core.usercaches)."""
    _load(user_id, budgets.user_budget_peek(user_id), budgets.group_scopes_peek(user_id))


async def _run(function, *args) -> None:  # type: ignore[no-untyped-def]
    # Redis: one round trip on loopback, cheaper than a thread crossing; the database: from a thread.
    if budgets.uses_redis():
        function(*args)
    else:
        await db(function, *args)


class UsageMetering:
    async def check(self, caller: Caller) -> None:
        scopes = await scopes_for(caller)
        if scopes:
            await _run(budgets.check, scopes)

    async def admit(self, caller: Caller, model: str, *, prompt_tokens: int = 0,
                    max_tokens: int | None = None) -> object | None:
        if not prices.fresh:
            await db(prices.load)
        scopes = await scopes_for(caller)
        if not scopes:
            return None
        reply = settings.AGENTSITE_BUDGET_DEFAULT_MAX_TOKENS if max_tokens is None else max(0, max_tokens)
        tokens = max(0, prompt_tokens) + reply
        hold = await _reserve(scopes, tokens, prices.worst_cost(model, max(0, prompt_tokens), reply))
        return Ticket(scopes, hold)

    def record(self, record: CallRecord, ticket: object | None):  # type: ignore[no-untyped-def]
        cost = prices.cost(record)
        buffer.add(record, cost)
        if isinstance(ticket, Ticket):
            return _run(functools.partial(budgets.settle, hold=ticket.hold), ticket.scopes,
                        record.prompt_tokens + record.completion_tokens, cost)
        return None


_releases: set[asyncio.Task[None]] = set()


async def _reserve(scopes: list[budgets.Scope], tokens: int, cost: float) -> budgets.Hold:
    if budgets.uses_redis():
        return budgets.reserve(scopes, tokens=tokens, cost=cost)  # one round trip; no await, so no cancellation
    started = db_started(budgets.reserve, scopes, tokens=tokens, cost=cost)
    try:
        return await asyncio.shield(started)
    except asyncio.CancelledError:
        # The thread runs on and may take the hold after all: whoever was waiting is gone, so give it back.
        started.add_done_callback(functools.partial(_release_late, scopes))
        raise


def _release_late(scopes: list[budgets.Scope], started: asyncio.Future) -> None:
    if started.cancelled() or started.exception() is not None:
        return
    task = asyncio.ensure_future(_run(functools.partial(budgets.settle, hold=started.result()), scopes, 0, 0.0))
    _releases.add(task)
    task.add_done_callback(_releases.discard)

"""Budgets and rate limits: which limits bind a caller, what each scope used in its windows, admit and settle.

A caller is bound by its user's budget (`u:<id>`), its API key's (`k:<id>`) and the budget of each group the user
is a member of when the call is made (`g:<id>`: every member's calls counted together), each limit in its UTC
window (minute, day, month). `reserve` runs before the upstream is called, atomically for every process (a Lua script
in Redis, else a database transaction under a per-scope lock): the call's worst case must fit what is left, and
is held until `settle` adds what it used and releases the hold in one step (AppError 429 `rate_limited` or
`budget_exceeded` otherwise, with Retry-After). A hold expires after HOLD_SLOTS slots, so a call whose process
died stops holding. Concurrent calls never spend past a limit by more than their reservations under-estimated.
"""

from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F

from agentsite.core import invalidation, metrics, usercaches
from agentsite.core.errors import AppError
from organisation.selectors import memberships
from usage.models import BudgetCounter, GroupBudget, UserBudget

LIMITS = ("requests_per_minute", "tokens_per_minute", "tokens_per_day", "cost_per_day", "tokens_per_month",
          "cost_per_month")
INTEGER_LIMITS = {"requests_per_minute", "tokens_per_minute", "tokens_per_day", "tokens_per_month"}
# limit -> (window, counter)
WINDOWS = {"requests_per_minute": ("m", "r"), "tokens_per_minute": ("m", "t"), "tokens_per_day": ("d", "t"),
           "cost_per_day": ("d", "c"), "tokens_per_month": ("M", "t"), "cost_per_month": ("M", "c")}
_COLUMN = {"r": "requests", "t": "tokens", "c": "cost"}
BUDGET_TOPIC = "usage-budget"
GROUP_BUDGET_TOPIC = "usage-group-budget"  # any key: every group's budget is read again
BUDGET_CACHE_S = 5.0
HOLD_SLOT_S = 600
HOLD_SLOTS = 4
HOLD_EXPIRY_S = HOLD_SLOT_S * (HOLD_SLOTS + 1)
# A cost is a float: a sum of prices may land a hair past a limit it meets exactly.
EPSILON = 1e-9


@dataclass(frozen=True)
class Scope:
    name: str  # u:<user id> | k:<key id> | g:<group id>
    limits: dict[str, float]  # only the limits set
    label: str = field(default="", compare=False)  # a group's name, for its refusal


@dataclass(frozen=True)
class Hold:
    """What an admitted call holds until it settles: its worst case, in the hold slot it was admitted in."""

    slot: int
    tokens: int = 0
    cost: float = 0.0


@dataclass(frozen=True)
class Windows:
    now: float
    minute: str
    day: str
    month: str

    @classmethod
    def at(cls, now: float | None = None) -> Windows:
        now = time.time() if now is None else now
        moment = datetime.fromtimestamp(now, UTC)
        return cls(now, f"m{int(now // 60)}", moment.strftime("d%Y%m%d"), moment.strftime("M%Y%m"))

    def name(self, window: str) -> str:
        return {"m": self.minute, "d": self.day, "M": self.month}[window]

    @property
    def slot(self) -> int:
        return int(self.now // HOLD_SLOT_S)

    def held(self) -> list[str]:
        """The hold slots that still count now, the current one first."""
        return [f"h{self.slot - back}" for back in range(HOLD_SLOTS)]

    def retry_after(self, window: str) -> int:
        moment = datetime.fromtimestamp(self.now, UTC)
        if window == "m":
            end = (int(self.now // 60) + 1) * 60.0
        elif window == "d":
            end = (moment.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)).timestamp()
        else:
            first = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
            end = (first + timedelta(days=32)).replace(day=1).timestamp()
        return max(1, math.ceil(end - self.now))

    def ends_at(self, window: str) -> str:
        """When the window ends (the next starts), as an ISO 8601 UTC time."""
        end = datetime.fromtimestamp(math.ceil(self.now) + self.retry_after(window), UTC)
        if window == "m":
            end = end.replace(second=0)
        elif window == "d":
            end = end.replace(hour=0, minute=0, second=0)
        else:
            end = end.replace(day=1, hour=0, minute=0, second=0)
        return end.strftime("%Y-%m-%dT%H:%M:%SZ")

    def expiry(self, window: str) -> int:
        return {"m": 120, "d": 2 * 86400, "M": 32 * 86400}[window]


def clean_budget(budget: dict[str, Any] | None) -> dict[str, float]:
    """The limits set in a stored budget (null ones dropped)."""
    return {name: value for name, value in (budget or {}).items() if name in LIMITS and value is not None}


def refusal(limit: str, windows: Windows, scope: str, *, needed: float = 0, left: float = 0,
            label: str = "") -> AppError:
    """The 429 of a limit: `needed` is what the call would take of it, `left` what was left of it; a group's
    names the group (`details.group`: its id)."""
    window = WINDOWS[limit][0]
    retry = windows.retry_after(window)
    group = scope.startswith("g:")
    whose = ("This API key's" if scope.startswith("k:")
             else f"Your group {label or scope[2:]}'s" if group else "Your")
    code = "rate_limited" if window == "m" else "budget_exceeded"
    what = {"m": "this minute", "d": "today (UTC)", "M": "this month (UTC)"}[window]
    if left > 0:
        message = (f"{whose} {'limit' if code == 'rate_limited' else 'budget'} {limit} has {_amount(left)} left "
                   f"{what}, less than this call may use ({_amount(needed)}: its prompt and max_tokens); ask for "
                   f"fewer max_tokens, or wait {retry} seconds for it to renew.")
    elif code == "rate_limited":
        message = f"{whose} limit {limit} is reached for {what}; try again in {retry} seconds."
    else:
        message = f"{whose} budget {limit} is spent for {what}; it renews in {retry} seconds."
    metrics.budget_refused()
    details: dict[str, Any] = {"limit": limit, "retry_after": retry, "needed": _amount_value(needed),
                               "left": _amount_value(left)}
    if group:
        details["group"] = int(scope[2:])
    return AppError(code, message, 429, details, headers={"Retry-After": str(retry)})


def _amount_value(value: float) -> float | int:
    value = max(0.0, float(value))
    return int(value) if value == int(value) else round(value, 6)


def _amount(value: float) -> str:
    shown = _amount_value(value)
    return f"{shown:,}" if isinstance(shown, int) else f"{shown:g}"


# --- which scopes bind a caller ---------------------------------------------------------------------------

_user_budgets: dict[int, tuple[float, dict[str, float]]] = {}
_cache_lock = threading.Lock()


def drop_user_budget(key: str | None) -> None:
    with _cache_lock:
        if key is None:
            _user_budgets.clear()
        else:
            _user_budgets.pop(int(key), None)



def user_budget_peek(user_id: int) -> dict[str, float] | None:
    """The user's limits when cached and fresh, else None (load with `user_budget_load`)."""
    invalidation.listen()
    entry = _user_budgets.get(user_id)
    return entry[1] if entry is not None and entry[0] > time.monotonic() else None


def user_budget_load(user_id: int) -> dict[str, float]:
    row = UserBudget.objects.filter(pk=user_id).values_list("budget", flat=True).first()
    limits = clean_budget(row)
    with _cache_lock:
        _user_budgets[user_id] = (time.monotonic() + BUDGET_CACHE_S, limits)
    return limits


def user_budget_changed(user_id: int) -> None:
    invalidation.announce(BUDGET_TOPIC, str(user_id))


# A member's group scopes: from their memberships (organisation.selectors, cached per process) and the table of
# every group's budget (one query, cached BUDGET_CACHE_S like a user's). Cached per user like the memberships:
# dropped when a membership of the user or a group changes (organisation's topic) or a group's budget does, kept
# only while those announcements reach this process, so a removed member is free of the group's budget on
# their next call in any process.
_group_budgets: tuple[float, dict[int, dict[str, float]]] | None = None
_member_scopes: dict[int, tuple[float, tuple[Scope, ...]]] = {}
_generation = 0


def drop_group_budgets(key: str | None) -> None:
    """GROUP_BUDGET_TOPIC: a group's budget changed (any key): the table and every member's scopes go."""
    global _group_budgets, _generation
    with _cache_lock:
        _generation += 1
        _group_budgets = None
        _member_scopes.clear()


def drop_member_scopes(key: str | None) -> None:
    """organisation.selectors.TOPIC: the user's memberships changed (None: a group changed, or everything)."""
    global _generation
    with _cache_lock:
        _generation += 1
        if key is None:
            _member_scopes.clear()
        else:
            _member_scopes.pop(int(key), None)


def group_scopes_peek(user_id: int) -> tuple[Scope, ...] | None:
    """The scopes of the user's budgeted groups when cached and fresh (none at all while no group has a budget),
    else None (load with `group_scopes_load`)."""
    now = time.monotonic()
    table = _group_budgets
    if table is not None and table[0] > now and not table[1]:
        return ()
    entry = _member_scopes.get(user_id)
    return entry[1] if entry is not None and entry[0] > now else None


def group_scopes_load(user_id: int) -> tuple[Scope, ...]:
    """The scopes of the user's groups that have a budget, in the order of the groups' names (sync: may read the
    database: the groups' budgets every BUDGET_CACHE_S, then, when some group has one, the user's memberships
    when not cached)."""
    global _group_budgets
    invalidation.listen()  # before the load, as the memberships do: a hit needs no call
    with _cache_lock:
        generation = _generation
    table = _group_budgets
    if table is None or table[0] <= time.monotonic():
        rows = GroupBudget.objects.values_list("group_id", "budget")
        table = (time.monotonic() + BUDGET_CACHE_S,
                 {group_id: limits for group_id, budget in rows if (limits := clean_budget(budget))})
        with _cache_lock:
            if generation == _generation:
                _group_budgets = table
    if not table[1]:
        return ()
    scopes = tuple(Scope(f"g:{group.id}", table[1][group.id], group.name) for group in memberships(user_id)
                   if group.id in table[1])
    ttl = usercaches.ttl()  # as the memberships it is made of
    with _cache_lock:
        # Not stored when a drop raced the load, nor where no announcement can arrive (as the memberships).
        if generation == _generation and invalidation.connected():
            _member_scopes[user_id] = (time.monotonic() + ttl, scopes)
    return scopes


def group_budget_changed() -> None:
    invalidation.announce(GROUP_BUDGET_TOPIC, None)


# --- the admission rule (the Lua script below is the same rule) ---------------------------------------------


def refused_limit(scope: Scope, used: dict[str, dict[str, float]], tokens: int = 0,
                  cost: float = 0.0) -> tuple[str, float, float] | None:
    """The first limit of `scope` a call of this worst case may not pass, with what it needs of it and what is
    left of it; else None.

    Of each limit, `left` = the limit - what its window used - what calls in flight hold (tokens and cost; a
    request is taken at admission, not held). A call passes when something is left and its need fits in it:
    need == left passes, need == left + 1 is refused. A call needs 1 request, `tokens` and `cost`.
    """
    held = used.get("h", {})
    need = {"r": 1, "t": tokens, "c": cost}
    for limit in LIMITS:
        value = scope.limits.get(limit)
        if value is None:
            continue
        window, counter = WINDOWS[limit]
        left = value - used[window].get(counter, 0) - (held.get(counter, 0) if counter != "r" else 0)
        if left <= 0 or need[counter] > left + EPSILON:
            return limit, need[counter], left
    return None


# --- the counters: Redis ------------------------------------------------------------------------------------

# KEYS: per scope, its minute, day and month hashes, then its HOLD_SLOTS hold hashes (the current one first).
# ARGV: n scopes, tokens, cost, hold expiry, slots; each limit's window (1 m, 2 d, 3 M) and counter (r|t|c), in
# LIMITS order; then each scope's limits in LIMITS order (-1: none).
_ADMIT = """
local n, slots = tonumber(ARGV[1]), tonumber(ARGV[5])
local need = {r = 1, t = tonumber(ARGV[2]), c = tonumber(ARGV[3])}
local per, nlimits = 3 + slots, 6
local base = 5 + 2 * nlimits
for i = 0, n - 1 do
  local held = {r = 0, t = 0, c = 0}
  for s = 1, slots do
    local key = KEYS[i * per + 3 + s]
    held.t = held.t + tonumber(redis.call('HGET', key, 't') or '0')
    held.c = held.c + tonumber(redis.call('HGET', key, 'c') or '0')
  end
  for j = 1, nlimits do
    local limit = tonumber(ARGV[base + i * nlimits + j])
    if limit >= 0 then
      local counter = ARGV[5 + nlimits + j]
      local key = KEYS[i * per + tonumber(ARGV[5 + j])]
      local left = limit - tonumber(redis.call('HGET', key, counter) or '0') - held[counter]
      if left <= 0 or need[counter] > left + 1e-9 then return {i, j, tostring(left)} end
    end
  end
end
for i = 0, n - 1 do
  redis.call('HINCRBY', KEYS[i * per + 1], 'r', 1)
  redis.call('EXPIRE', KEYS[i * per + 1], 120)
  local hold = KEYS[i * per + 4]
  if need.t ~= 0 then redis.call('HINCRBY', hold, 't', need.t) end
  if need.c ~= 0 then redis.call('HINCRBYFLOAT', hold, 'c', ARGV[3]) end
  redis.call('EXPIRE', hold, tonumber(ARGV[4]))
end
return {-1, 0, '0'}
"""

_clients: dict[int, Any] = {}


def _redis() -> Any:
    client = _clients.get(os.getpid())
    if client is None:
        # Optional: the Redis client is imported only with REDIS_URL.
        import redis

        client = _clients[os.getpid()] = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2,
                                                              socket_timeout=2)
        client.admit_script = client.register_script(_ADMIT)
    return client


def _key(scope: str, window_name: str) -> str:
    return f"{os.environ.get('AGENTSITE_CACHE_PREFIX', 'agentsite')}:budget:{scope}:{window_name}"


_WINDOW_INDEX = {"m": 1, "d": 2, "M": 3}


def _redis_reserve(scopes: list[Scope], windows: Windows, tokens: int, cost: float) -> None:
    client = _redis()
    keys, limits = [], []
    for scope in scopes:
        keys += [_key(scope.name, windows.name(window)) for window in ("m", "d", "M")]
        keys += [_key(scope.name, slot) for slot in windows.held()]
        limits += [scope.limits.get(limit, -1) for limit in LIMITS]
    shape = [_WINDOW_INDEX[WINDOWS[limit][0]] for limit in LIMITS] + [WINDOWS[limit][1] for limit in LIMITS]
    index, which, left = client.admit_script(keys=keys, args=[len(scopes), tokens, repr(float(cost)),
                                                              HOLD_EXPIRY_S, HOLD_SLOTS, *shape, *limits])
    if index >= 0:
        limit = LIMITS[which - 1]
        needed = {"r": 1, "t": tokens, "c": cost}[WINDOWS[limit][1]]
        raise refusal(limit, windows, scopes[index].name, needed=needed, left=float(left), label=scopes[index].label)


def _redis_settle(scopes: list[Scope], windows: Windows, tokens: int, cost: float, hold: Hold | None) -> None:
    pipe = _redis().pipeline(transaction=True)  # MULTI: the use is added and the hold released at once
    for scope in scopes:
        for window in ("m", "d", "M"):
            key = _key(scope.name, windows.name(window))
            pipe.hincrby(key, "t", tokens)
            if cost:
                pipe.hincrbyfloat(key, "c", cost)
            pipe.expire(key, windows.expiry(window))
        if hold is not None and (hold.tokens or hold.cost):
            key = _key(scope.name, f"h{hold.slot}")
            pipe.hincrby(key, "t", -hold.tokens)
            if hold.cost:
                pipe.hincrbyfloat(key, "c", -hold.cost)
            pipe.expire(key, HOLD_EXPIRY_S)
    pipe.execute()


def _redis_used(scope: Scope, windows: Windows) -> dict[str, dict[str, float]]:
    pipe = _redis().pipeline(transaction=False)
    for window in ("m", "d", "M"):
        pipe.hgetall(_key(scope.name, windows.name(window)))
    for slot in windows.held():
        pipe.hgetall(_key(scope.name, slot))
    found = pipe.execute()
    used = {window: {field.decode(): float(value) for field, value in row.items()}
            for window, row in zip(("m", "d", "M"), found[:3], strict=True)}
    used["h"] = _sum_held([{field.decode(): float(value) for field, value in row.items()} for row in found[3:]])
    return used


def _sum_held(rows: list[dict[str, float]]) -> dict[str, float]:
    return {"t": sum(row.get("t", 0) for row in rows), "c": sum(row.get("c", 0) for row in rows)}


# --- the counters: the database ---------------------------------------------------------------------------


def _db_rows(scopes: list[Scope], windows: Windows) -> None:
    now = datetime.fromtimestamp(windows.now, UTC)
    rows = [BudgetCounter(scope=scope.name, window=windows.name(window),
                          expires_at=now + timedelta(seconds=windows.expiry(window)))
            for scope in scopes for window in ("m", "d", "M")]
    rows += [BudgetCounter(scope=scope.name, window=f"h{windows.slot}",
                           expires_at=now + timedelta(seconds=HOLD_EXPIRY_S)) for scope in scopes]
    BudgetCounter.objects.bulk_create(rows, ignore_conflicts=True)


def _db_used(scope: Scope, windows: Windows) -> dict[str, dict[str, float]]:
    names = {windows.name(window): window for window in ("m", "d", "M")}
    held = set(windows.held())
    used: dict[str, dict[str, float]] = {window: {} for window in ("m", "d", "M")}
    holds = []
    # One statement: a settle's transaction (use added, hold released) is seen whole or not at all.
    for row in BudgetCounter.objects.filter(scope=scope.name, window__in=[*names, *held]):
        if row.window in held:
            holds.append({"t": row.tokens, "c": row.cost})
        else:
            used[names[row.window]] = {"r": row.requests, "t": row.tokens, "c": row.cost}
    used["h"] = _sum_held(holds)
    return used


def _db_lock(scopes: list[Scope]) -> None:
    """Admissions of one scope, one at a time until the transaction ends: PostgreSQL's advisory lock (SQLite's
    IMMEDIATE transactions already hold the database's one write lock)."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        for scope in sorted(scopes, key=lambda scope: scope.name):  # one order: two admissions cannot deadlock
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"agentsite-budget:{scope.name}"])


def _db_reserve(scopes: list[Scope], windows: Windows, tokens: int, cost: float) -> None:
    _db_rows(scopes, windows)
    with transaction.atomic():
        _db_lock(scopes)
        for scope in scopes:
            refused = refused_limit(scope, _db_used(scope, windows), tokens, cost)
            if refused is not None:
                limit, needed, left = refused
                raise refusal(limit, windows, scope.name, needed=needed, left=left, label=scope.label)
        for scope in scopes:
            BudgetCounter.objects.filter(scope=scope.name, window=windows.minute).update(requests=F("requests") + 1)
            if tokens or cost:
                BudgetCounter.objects.filter(scope=scope.name, window=f"h{windows.slot}").update(
                    tokens=F("tokens") + tokens, cost=F("cost") + cost)


def _db_settle(scopes: list[Scope], windows: Windows, tokens: int, cost: float, hold: Hold | None) -> None:
    names = [windows.name(window) for window in ("m", "d", "M")]
    with transaction.atomic():
        for scope in sorted(scopes, key=lambda scope: scope.name):
            BudgetCounter.objects.filter(scope=scope.name, window__in=names).update(
                tokens=F("tokens") + tokens, cost=F("cost") + cost)
            if hold is not None and (hold.tokens or hold.cost):
                BudgetCounter.objects.filter(scope=scope.name, window=f"h{hold.slot}").update(
                    tokens=F("tokens") - hold.tokens, cost=F("cost") - hold.cost)
    global _cleaned_at
    if time.monotonic() - _cleaned_at > CLEAN_EVERY_S and not connection.in_atomic_block:
        _cleaned_at = time.monotonic()
        BudgetCounter.objects.filter(expires_at__lt=datetime.now(UTC)).delete()


CLEAN_EVERY_S = 300.0
_cleaned_at = 0.0


# --- the entry points (sync: call them from a thread, `agentsite.core.dbcall.db`, when there is no Redis) -----


def uses_redis() -> bool:
    return bool(getattr(settings, "REDIS_URL", ""))


def reserve(scopes: list[Scope], windows: Windows | None = None, *, tokens: int = 0, cost: float = 0.0) -> Hold:
    """Admit a call whose worst case is `tokens` and `cost`, or raise its refusal (AppError 429); the Hold is
    what `settle` releases."""
    windows = windows or Windows.at()
    tokens, cost = max(0, int(tokens)), max(0.0, float(cost))
    if uses_redis():
        _redis_reserve(scopes, windows, tokens, cost)
    else:
        _db_reserve(scopes, windows, tokens, cost)
    return Hold(windows.slot, tokens, cost)


def settle(scopes: list[Scope], tokens: int, cost: float, windows: Windows | None = None, *,
           hold: Hold | None = None) -> None:
    """Add what a call used and release its hold (call it however the call ended)."""
    windows = windows or Windows.at()
    if uses_redis():
        _redis_settle(scopes, windows, tokens, cost, hold)
    else:
        _db_settle(scopes, windows, tokens, cost, hold)


def used(scope: Scope, windows: Windows | None = None) -> dict[str, dict[str, float]]:
    """What the scope used in its current windows, and what calls in flight hold: {"m"|"d"|"M": {"r"|"t"|"c": n},
    "h": {"t"|"c": n}}."""
    windows = windows or Windows.at()
    return _redis_used(scope, windows) if uses_redis() else _db_used(scope, windows)


def check(scopes: list[Scope], windows: Windows | None = None) -> None:
    """Raise the refusal a call would get now when nothing is left of a limit, reserving nothing."""
    windows = windows or Windows.at()
    for scope in scopes:
        refused = refused_limit(scope, used(scope, windows))
        if refused is not None:
            raise refusal(refused[0], windows, scope.name, label=scope.label)


def remaining(scope: Scope, windows: Windows | None = None) -> dict[str, dict[str, Any]]:
    """Each limit of the scope: {limit, used, remaining, resets_at}; `remaining` leaves out what calls in flight
    hold."""
    windows = windows or Windows.at()
    spent = used(scope, windows)
    out = {}
    for limit in LIMITS:
        window, counter = WINDOWS[limit]
        value = scope.limits.get(limit)
        amount = spent[window].get(counter, 0)
        held = spent["h"].get(counter, 0) if counter != "r" else 0
        amount = round(amount, 6) if counter == "c" else int(amount)
        out[limit] = {"limit": value, "used": amount,
                      "remaining": None if value is None else max(0, round(value - amount - held, 6)),
                      "resets_at": windows.ends_at(window)}
    return out

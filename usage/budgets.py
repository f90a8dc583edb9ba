"""Budgets and rate limits: which limits bind a caller, what each scope used in its windows, admit and settle.

A caller is bound by up to two scopes: its user's budget (`u:<id>`, set by an admin) and its API key's (`k:<id>`,
set by the key's owner). A budget is `{tokens_per_day?, tokens_per_month?, cost_per_day?, cost_per_month?,
requests_per_minute?, tokens_per_minute?}`; each limit is checked in its window (the UTC minute, day, month).

- `reserve(scopes)` runs BEFORE the upstream is called, atomically for every process of the deployment (one Lua
  script in Redis when REDIS_URL is set; else conditional UPDATEs in the database): every limit must still have
  room, and the call takes one request of each scope's minute. It raises AppError 429 `rate_limited` (a
  per-minute limit) or `budget_exceeded` (a day or month), with Retry-After: the seconds until that window ends.
- `settle(scopes, tokens, cost)` adds what the call used once it ended. Tokens are not reserved ahead (nobody
  knows a reply's length): a call that crosses a token or cost budget finishes, and the next one is refused.

Invariant: of N concurrent calls against `requests_per_minute: n`, at most n pass in a minute, whichever
process serves them (tests/usage/test_budgets.py). Counters exist only for scopes that have a budget: a caller
without one costs one cached lookup.
"""

from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import F

from agentsite.core import invalidation, metrics
from agentsite.core.errors import AppError

LIMITS = ("requests_per_minute", "tokens_per_minute", "tokens_per_day", "cost_per_day", "tokens_per_month",
          "cost_per_month")
INTEGER_LIMITS = {"requests_per_minute", "tokens_per_minute", "tokens_per_day", "tokens_per_month"}
# limit -> (window, counter)
WINDOWS = {"requests_per_minute": ("m", "r"), "tokens_per_minute": ("m", "t"), "tokens_per_day": ("d", "t"),
           "cost_per_day": ("d", "c"), "tokens_per_month": ("M", "t"), "cost_per_month": ("M", "c")}
_COLUMN = {"r": "requests", "t": "tokens", "c": "cost"}
BUDGET_TOPIC = "usage-budget"
BUDGET_CACHE_S = 5.0


@dataclass(frozen=True)
class Scope:
    name: str  # u:<user id> | k:<key id>
    limits: dict[str, float]  # only the limits set


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


def refusal(limit: str, windows: Windows, scope: str) -> AppError:
    window = WINDOWS[limit][0]
    retry = windows.retry_after(window)
    whose = "This API key's" if scope.startswith("k:") else "Your"
    code = "rate_limited" if window == "m" else "budget_exceeded"
    what = {"m": "this minute", "d": "today (UTC)", "M": "this month (UTC)"}[window]
    if code == "rate_limited":
        message = f"{whose} limit {limit} is reached for {what}; try again in {retry} seconds."
    else:
        message = f"{whose} budget {limit} is spent for {what}; it renews in {retry} seconds."
    metrics.budget_refused()
    return AppError(code, message, 429, {"limit": limit, "retry_after": retry}, headers={"Retry-After": str(retry)})


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
    from usage.models import UserBudget

    row = UserBudget.objects.filter(pk=user_id).values_list("budget", flat=True).first()
    limits = clean_budget(row)
    with _cache_lock:
        _user_budgets[user_id] = (time.monotonic() + BUDGET_CACHE_S, limits)
    return limits


def user_budget_changed(user_id: int) -> None:
    invalidation.announce(BUDGET_TOPIC, str(user_id))


# --- the counters: Redis ------------------------------------------------------------------------------------

_ADMIT = """
local n = tonumber(ARGV[1])
for i = 0, n - 1 do
  for j = 1, 6 do
    local limit = tonumber(ARGV[1 + i * 6 + j])
    if limit >= 0 then
      local key = KEYS[i * 6 + j]
      local field = ARGV[1 + n * 6 + j]
      local used = tonumber(redis.call('HGET', key, field) or '0')
      if used >= limit then return {i, j} end
    end
  end
end
for i = 0, n - 1 do
  redis.call('HINCRBY', KEYS[i * 6 + 1], 'r', 1)
  redis.call('EXPIRE', KEYS[i * 6 + 1], 120)
end
return {-1, 0}
"""

_clients: dict[int, Any] = {}


def _redis() -> Any:
    client = _clients.get(os.getpid())
    if client is None:
        import redis

        client = _clients[os.getpid()] = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2,
                                                              socket_timeout=2)
        client.admit_script = client.register_script(_ADMIT)
    return client


def _key(scope: str, window_name: str) -> str:
    return f"{os.environ.get('AGENTSITE_CACHE_PREFIX', 'agentsite')}:budget:{scope}:{window_name}"


def _redis_reserve(scopes: list[Scope], windows: Windows) -> None:
    client = _redis()
    keys, limits = [], []
    for scope in scopes:
        for limit in LIMITS:
            keys.append(_key(scope.name, windows.name(WINDOWS[limit][0])))
            value = scope.limits.get(limit)
            limits.append(-1 if value is None else value)
    fields = [WINDOWS[limit][1] for limit in LIMITS]
    index, which = client.admit_script(keys=keys, args=[len(scopes), *limits, *fields])
    if index >= 0:
        raise refusal(LIMITS[which - 1], windows, scopes[index].name)


def _redis_settle(scopes: list[Scope], windows: Windows, tokens: int, cost: float) -> None:
    pipe = _redis().pipeline(transaction=False)
    for scope in scopes:
        for window in ("m", "d", "M"):
            key = _key(scope.name, windows.name(window))
            pipe.hincrby(key, "t", tokens)
            if cost:
                pipe.hincrbyfloat(key, "c", cost)
            pipe.expire(key, windows.expiry(window))
    pipe.execute()


def _redis_used(scope: Scope, windows: Windows) -> dict[str, dict[str, float]]:
    pipe = _redis().pipeline(transaction=False)
    for window in ("m", "d", "M"):
        pipe.hgetall(_key(scope.name, windows.name(window)))
    return {window: {field.decode(): float(value) for field, value in found.items()}
            for window, found in zip(("m", "d", "M"), pipe.execute(), strict=True)}


# --- the counters: the database ---------------------------------------------------------------------------


def _db_rows(scopes: list[Scope], windows: Windows) -> None:
    from usage.models import BudgetCounter

    now = datetime.fromtimestamp(windows.now, UTC)
    BudgetCounter.objects.bulk_create(
        [BudgetCounter(scope=scope.name, window=windows.name(window),
                       expires_at=now + timedelta(seconds=windows.expiry(window)))
         for scope in scopes for window in ("m", "d", "M")], ignore_conflicts=True)


def _db_used(scope: Scope, windows: Windows) -> dict[str, dict[str, float]]:
    from usage.models import BudgetCounter

    names = {windows.name(window): window for window in ("m", "d", "M")}
    used: dict[str, dict[str, float]] = {window: {} for window in ("m", "d", "M")}
    for row in BudgetCounter.objects.filter(scope=scope.name, window__in=list(names)):
        used[names[row.window]] = {"r": row.requests, "t": row.tokens, "c": row.cost}
    return used


def _db_reserve(scopes: list[Scope], windows: Windows) -> None:
    from usage.models import BudgetCounter

    _db_rows(scopes, windows)
    for scope in scopes:
        _refuse_if_spent(scope, _db_used(scope, windows), windows, skip_requests=True)
    taken: list[Scope] = []
    try:
        for scope in scopes:
            rpm = scope.limits.get("requests_per_minute")
            rows = BudgetCounter.objects.filter(scope=scope.name, window=windows.minute)
            if rpm is not None:
                rows = rows.filter(requests__lt=rpm)
            if rows.update(requests=F("requests") + 1) == 0:  # atomic: the row's lock decides who gets the last
                raise refusal("requests_per_minute", windows, scope.name)
            taken.append(scope)
    except AppError:
        for scope in taken:  # give back what this call took before it was refused
            BudgetCounter.objects.filter(scope=scope.name, window=windows.minute).update(requests=F("requests") - 1)
        raise


def _db_settle(scopes: list[Scope], windows: Windows, tokens: int, cost: float) -> None:
    from usage.models import BudgetCounter

    names = [windows.name(window) for window in ("m", "d", "M")]
    for scope in scopes:
        BudgetCounter.objects.filter(scope=scope.name, window__in=names).update(
            tokens=F("tokens") + tokens, cost=F("cost") + cost)
    global _cleaned_at
    if time.monotonic() - _cleaned_at > CLEAN_EVERY_S and not connection.in_atomic_block:
        _cleaned_at = time.monotonic()
        BudgetCounter.objects.filter(expires_at__lt=datetime.now(UTC)).delete()


CLEAN_EVERY_S = 300.0
_cleaned_at = 0.0


def _refuse_if_spent(scope: Scope, used: dict[str, dict[str, float]], windows: Windows, *,
                     skip_requests: bool = False) -> None:
    for limit, value in scope.limits.items():
        if skip_requests and limit == "requests_per_minute":
            continue
        window, counter = WINDOWS[limit]
        if used[window].get(counter, 0) >= value:
            raise refusal(limit, windows, scope.name)


# --- the entry points (sync: call them from a thread, `agentsite.core.dbcall.db`, when there is no Redis) -----


def uses_redis() -> bool:
    return bool(getattr(settings, "REDIS_URL", ""))


def reserve(scopes: list[Scope], windows: Windows | None = None) -> None:
    windows = windows or Windows.at()
    if uses_redis():
        _redis_reserve(scopes, windows)
    else:
        _db_reserve(scopes, windows)


def settle(scopes: list[Scope], tokens: int, cost: float, windows: Windows | None = None) -> None:
    windows = windows or Windows.at()
    if uses_redis():
        _redis_settle(scopes, windows, tokens, cost)
    else:
        _db_settle(scopes, windows, tokens, cost)


def used(scope: Scope, windows: Windows | None = None) -> dict[str, dict[str, float]]:
    """What the scope used in its current windows: {"m"|"d"|"M": {"r"|"t"|"c": n}}."""
    windows = windows or Windows.at()
    return _redis_used(scope, windows) if uses_redis() else _db_used(scope, windows)


def check(scopes: list[Scope], windows: Windows | None = None) -> None:
    """Raise the refusal a call would get now, reserving nothing."""
    windows = windows or Windows.at()
    for scope in scopes:
        _refuse_if_spent(scope, used(scope, windows), windows)


def remaining(scope: Scope, windows: Windows | None = None) -> dict[str, dict[str, Any]]:
    """Each limit of the scope: {limit, used, remaining, resets_at}."""
    windows = windows or Windows.at()
    spent = used(scope, windows)
    out = {}
    for limit in LIMITS:
        window, counter = WINDOWS[limit]
        value = scope.limits.get(limit)
        amount = spent[window].get(counter, 0)
        amount = round(amount, 6) if counter == "c" else int(amount)
        out[limit] = {"limit": value, "used": amount,
                      "remaining": None if value is None else max(0, round(value - amount, 6)),
                      "resets_at": windows.ends_at(window)}
    return out

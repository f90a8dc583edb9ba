"""Usage aggregates, the price table, users' budgets and the budget counters kept without Redis.

Usage is stored as aggregates, never a row per call: one row per (day, user, key, facet, model requested,
model answered, agent) whose counters the flusher adds to (usage.buffer). A month of a busy server is a few thousand
rows per user at most, so /api/usage reads stay fast however many calls were made (bench/usage.py).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class UsageDaily(models.Model):
    """Calls of one day (UTC) by one caller through one door to one model for one named agent. `user_id` 0:
    anonymous; `key_id` "": no API key; `agent` the slug of the named agent the calls were made for, as it was at
    the call ("": none, a plain model) (not foreign keys: the usage of a deleted key, user or agent stays
    counted). `latency_ms` is the sum over the calls; `errors` and `interrupted` count the calls that ended so;
    `estimated` those whose tokens were counted from the text because the upstream sent no usage."""

    day = models.DateField()
    user_id = models.IntegerField(default=0)
    key_id = models.CharField(max_length=64, blank=True, default="")
    facet = models.CharField(max_length=32)
    model_requested = models.CharField(max_length=200)
    model_answered = models.CharField(max_length=200, blank=True, default="")
    agent = models.CharField(max_length=64, blank=True, default="")
    requests = models.BigIntegerField(default=0)
    errors = models.BigIntegerField(default=0)
    interrupted = models.BigIntegerField(default=0)
    estimated = models.BigIntegerField(default=0)
    prompt_tokens = models.BigIntegerField(default=0)
    completion_tokens = models.BigIntegerField(default=0)
    cost = models.FloatField(default=0.0)
    latency_ms = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(
            fields=["day", "user_id", "key_id", "facet", "model_requested", "model_answered", "agent"],
            name="usage_daily_agent_row")]
        # `?agent=<slug>` over everyone reads (agent, day); a user's own usage by agent reads (user_id, day).
        indexes = [models.Index(fields=["user_id", "day"], name="usage_user_day"),
                   models.Index(fields=["day"], name="usage_day"),
                   models.Index(fields=["agent", "day"], name="usage_agent_day")]

    def __str__(self) -> str:
        return f"usage {self.day} user {self.user_id} {self.model_requested}"


class UsageUserDaily(models.Model):
    """The same calls rolled up per (day, user): what the admin's questions over everyone read (group_by user or
    day), a row per user and day whatever the number of keys, models and doors. Written by the same flush, in
    the same transaction, as UsageDaily (usage.buffer), so the two always agree."""

    day = models.DateField()
    user_id = models.IntegerField(default=0)
    requests = models.BigIntegerField(default=0)
    prompt_tokens = models.BigIntegerField(default=0)
    completion_tokens = models.BigIntegerField(default=0)
    cost = models.FloatField(default=0.0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["day", "user_id"], name="usage_user_daily_row")]
        indexes = [models.Index(fields=["user_id", "day"], name="usage_rollup_user_day")]

    def __str__(self) -> str:
        return f"usage {self.day} user {self.user_id}"


class UsageAgentDaily(models.Model):
    """The same calls rolled up per (day, user, agent): what the questions by agent read (group_by agent, with day
    or user, and `?agent=`), a row per user, day and agent used ("": none, a plain model) whatever the keys,
    models and doors. Written by the same flush, in the same transaction, as UsageDaily (usage.buffer)."""

    day = models.DateField()
    user_id = models.IntegerField(default=0)
    agent = models.CharField(max_length=64, blank=True, default="")
    requests = models.BigIntegerField(default=0)
    prompt_tokens = models.BigIntegerField(default=0)
    completion_tokens = models.BigIntegerField(default=0)
    cost = models.FloatField(default=0.0)

    class Meta:
        # The unique row serves everyone's range (day first); a user's reads (user_id, day), one agent's (agent, day).
        constraints = [models.UniqueConstraint(fields=["day", "user_id", "agent"], name="usage_agent_daily_row")]
        indexes = [models.Index(fields=["user_id", "day"], name="usage_agent_rollup_user_day"),
                   models.Index(fields=["agent", "day"], name="usage_agent_rollup_agent_day")]

    def __str__(self) -> str:
        return f"usage {self.day} user {self.user_id} agent {self.agent}"


class ModelPrice(models.Model):
    """The price of a catalogue model, per million tokens in and out (the operator's currency)."""

    model = models.CharField(max_length=200, unique=True)
    input_per_million = models.FloatField(default=0.0)
    output_per_million = models.FloatField(default=0.0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"price of {self.model}"

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input_per_million + completion_tokens * self.output_per_million) / 1_000_000


class UserBudget(models.Model):
    """A user's budget, set by an admin: {tokens_per_day?, tokens_per_month?, cost_per_day?, cost_per_month?,
    requests_per_minute?, tokens_per_minute?}; a missing or null limit is no limit."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True,
                                related_name="usage_budget")
    budget = models.JSONField(default=dict)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"budget of user {self.user_id}"


class GroupBudget(models.Model):
    """A group's budget, set by an admin, with the fields of a user's: it binds every call of every member, their
    calls counted together (scope `g:<group id>`)."""

    group = models.OneToOneField("organisation.Group", on_delete=models.CASCADE, primary_key=True,
                                 related_name="usage_budget")
    budget = models.JSONField(default=dict)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"budget of group {self.group_id}"


class BudgetCounter(models.Model):
    """What a budget scope (`u:<user id>`, `k:<key id>`, `g:<group id>`) used in one window (`m<minute>`, `d<YYYYMMDD>`,
    `M<YYYYMM>`): the counters budgets are checked against when there is no Redis (with Redis they live there)."""

    scope = models.CharField(max_length=80)
    window = models.CharField(max_length=16)
    requests = models.BigIntegerField(default=0)
    tokens = models.BigIntegerField(default=0)
    cost = models.FloatField(default=0.0)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["scope", "window"], name="budget_counter_window")]

    def __str__(self) -> str:
        return f"{self.scope} {self.window}"

"""The LLM catalogue's rows: the upstream connections, the model aliases over them, and the agent's configuration.

The tables keep the names they had under `accounts` (Meta.db_table): moving the models to this app changed no
schema, so a process of the previous release still reads them while a new one starts.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from agentsite.agent.providers import PROVIDERS
from agentsite.agent.routing import STRATEGIES

NAME_PATTERN = r"^[a-z0-9_-]+$"


def provider_known(value: str) -> None:
    """A provider is a key of the provider registry (agentsite.agent.providers.PROVIDERS): the field carries no
    `choices`, so a provider added there needs no migration here."""
    if value not in PROVIDERS:
        raise ValidationError(f"provider: {value!r} is not one of {', '.join(PROVIDERS)}.", code="unknown")


def strategy_known(value: str) -> None:
    """A strategy is one of the router's (agentsite.agent.routing.STRATEGIES)."""
    if value not in STRATEGIES:
        raise ValidationError(f"strategy: {value!r} is not one of {', '.join(STRATEGIES)}.", code="unknown")


def _all_tools() -> list[str]:
    return ["*"]


class AgentConfig(models.Model):
    """The agent's configuration: one row (pk=1), edited through /api/config and Django admin."""

    STT_PROVIDERS = [("hosted", "Hosted"), ("local", "Local"), ("browser", "Browser")]
    TTS_PROVIDERS = [("hosted", "Hosted"), ("edge", "Edge"), ("local", "Local"), ("browser", "Browser")]
    # /v1's anonymous callers: `local` serves them from loopback only, `key` serves none (an API key or a
    # dashboard token), `public` serves anyone; `token` is the former name of `key` (same behaviour).
    COMPAT_AUTH = [("local", "Local"), ("key", "Key"), ("public", "Public"), ("token", "Token (same as key)")]

    # The connection a bare model name resolves against, and that /api/config's provider, base_url and api_key
    # edit.
    connection = models.ForeignKey("catalogue.Connection", null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    # The agent's default model: an alias, `<connection>/<model>`, or a bare model of `connection`.
    model = models.CharField(max_length=300, blank=True, default="")
    system_prompt = models.TextField(blank=True, default="You are a helpful assistant.")
    temperature = models.FloatField(default=0.7, validators=[MinValueValidator(0.0), MaxValueValidator(2.0)])
    max_tokens = models.PositiveIntegerField(default=1024, validators=[MinValueValidator(1)])
    tools = models.JSONField(default=_all_tools, blank=True)
    kb_enabled = models.BooleanField(default=True)
    kb_top_k = models.PositiveIntegerField(default=5, validators=[MinValueValidator(1), MaxValueValidator(50)])
    kb_max_chars = models.PositiveIntegerField(default=4000, validators=[MinValueValidator(1)])
    stt_provider = models.CharField(max_length=20, choices=STT_PROVIDERS, default="local")
    tts_provider = models.CharField(max_length=20, choices=TTS_PROVIDERS, default="local")
    tts_voice = models.CharField(max_length=100, blank=True, default="en-us-female")
    allow_registration = models.BooleanField(default=True)
    compat_auth = models.CharField(max_length=10, choices=COMPAT_AUTH, default="local")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "accounts_agentconfig"
        verbose_name = "agent configuration"
        verbose_name_plural = "agent configuration"

    def __str__(self) -> str:
        return f"Agent configuration ({self.model or 'default model'})"


class Connection(models.Model):
    """One upstream LLM endpoint (admin-defined). Its models are catalogue entries `<name>/<model>`
    (agentsite.agent.routing). `models` is a list of names, or the string "discover": then `discovered` holds
    the upstream's own list as last read (POST /api/connections/:id/discover), `discovery_error` the failure."""

    DISCOVER = "discover"

    name = models.CharField(max_length=64, unique=True, validators=[RegexValidator(NAME_PATTERN)])
    provider = models.CharField(max_length=20, default="openai", validators=[provider_known])
    base_url = models.CharField(max_length=500, blank=True, default="")
    api_key = models.CharField(max_length=500, blank=True, default="")
    headers = models.JSONField(default=dict, blank=True)
    timeout_s = models.FloatField(default=120.0, validators=[MinValueValidator(0.1), MaxValueValidator(3600.0)])
    enabled = models.BooleanField(default=True)
    # /v1/chat/completions: request fields this server does not know go to this upstream as sent (else a 400).
    passthrough = models.BooleanField(default=False)
    discovered = models.JSONField(default=list, blank=True)
    discovery_error = models.TextField(blank=True, default="")
    discovered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # Last: the field's name shadows the `models` module in the class body from here on.
    models = models.JSONField(default=list, blank=True)

    class Meta:
        db_table = "accounts_connection"
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.provider})"

    @property
    def discovers(self) -> bool:
        return self.models == self.DISCOVER

    def model_names(self) -> list[str]:
        """The names it serves: the discovered ones, else its list, else (an empty list) its provider's default
        model."""
        if self.discovers:
            return [str(name) for name in self.discovered or []]
        if self.models:
            return [str(name) for name in self.models]
        provider = PROVIDERS.get(self.provider)
        return [provider.default_model] if provider else []


class ModelAlias(models.Model):
    """A name for an ordered list of catalogue entries with a strategy (agentsite.agent.routing.STRATEGIES).
    `targets` is `[{"model": "<connection>/<model>", "weight": 1}]`; `fallback_on` lists the upstream 4xx
    statuses that also send the request to the next target (by default a 4xx is the caller's, never retried)."""

    name = models.CharField(max_length=100, unique=True,
                            validators=[RegexValidator(r"^[a-z0-9][a-z0-9_.:-]*$")])
    strategy = models.CharField(max_length=20, default="fallback", validators=[strategy_known])
    targets = models.JSONField(default=list)
    fallback_on = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "accounts_modelalias"
        ordering = ["name"]
        verbose_name = "model alias"
        verbose_name_plural = "model aliases"

    def __str__(self) -> str:
        return self.name

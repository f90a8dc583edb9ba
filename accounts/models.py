from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

PROVIDERS = [("openai", "OpenAI-compatible"), ("anthropic", "Anthropic"), ("offline", "Offline (no LLM)")]
NAME_PATTERN = r"^[a-z0-9_-]+$"


def _all_tools() -> list[str]:
    return ["*"]


class AgentConfig(models.Model):
    """The agent's configuration: one row (pk=1), edited through /api/config and Django admin."""

    STT_PROVIDERS = [("hosted", "Hosted"), ("local", "Local"), ("browser", "Browser")]
    TTS_PROVIDERS = [("hosted", "Hosted"), ("edge", "Edge"), ("local", "Local"), ("browser", "Browser")]
    COMPAT_AUTH = [("public", "Public"), ("token", "Token")]

    # The connection a bare model name resolves against, and that /api/config's provider, base_url and api_key
    # edit (they were this row's own fields before connections existed).
    connection = models.ForeignKey("accounts.Connection", null=True, blank=True, on_delete=models.SET_NULL,
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
    compat_auth = models.CharField(max_length=10, choices=COMPAT_AUTH, default="public")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
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
    provider = models.CharField(max_length=20, choices=PROVIDERS, default="openai")
    base_url = models.CharField(max_length=500, blank=True, default="")
    api_key = models.CharField(max_length=500, blank=True, default="")
    headers = models.JSONField(default=dict, blank=True)
    timeout_s = models.FloatField(default=120.0, validators=[MinValueValidator(0.1), MaxValueValidator(3600.0)])
    enabled = models.BooleanField(default=True)
    discovered = models.JSONField(default=list, blank=True)
    discovery_error = models.TextField(blank=True, default="")
    discovered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # Last: the field's name shadows the `models` module in the class body from here on.
    models = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.provider})"

    @property
    def discovers(self) -> bool:
        return self.models == self.DISCOVER

    def model_names(self) -> list[str]:
        """The names it serves: the discovered ones, else its list, else (an empty list) its provider's default
        model, as an empty config `model` meant before connections."""
        if self.discovers:
            return [str(name) for name in self.discovered or []]
        if self.models:
            return [str(name) for name in self.models]
        from agentsite.agent.providers import PROVIDERS

        provider = PROVIDERS.get(self.provider)
        return [provider.default_model] if provider else []


class ModelAlias(models.Model):
    """A name for an ordered list of catalogue entries with a strategy (agentsite.agent.routing.STRATEGIES).
    `targets` is `[{"model": "<connection>/<model>", "weight": 1}]`."""

    STRATEGIES = [("fallback", "Fallback (in order)"), ("balance", "Balance (weighted round-robin)"),
                  ("least_in_flight", "Balance (least in flight)")]

    name = models.CharField(max_length=100, unique=True,
                            validators=[RegexValidator(r"^[a-z0-9][a-z0-9_.:-]*$")])
    strategy = models.CharField(max_length=20, choices=STRATEGIES, default="fallback")
    targets = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "model alias"
        verbose_name_plural = "model aliases"

    def __str__(self) -> str:
        return self.name


class RevokedAccessToken(models.Model):
    """An access token revoked before its expiry (POST /api/auth/logout), by its `jti`.

    Kept until the token would have expired anyway (`expires_at`); later revocations delete the expired rows.
    Every process reads a user's unexpired revocations with the user (accounts.authentication.UserCache), so a
    revocation, announced like any change of the user, stops the token in every process at once.
    """

    jti = models.CharField(max_length=255, unique=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        indexes = [models.Index(fields=["user", "expires_at"])]

    def __str__(self) -> str:
        return f"revoked access token {self.jti}"


class AuditEvent(models.Model):
    """One audited event (agentsite/core/audit.py). Append-only: a saved row is never changed (save refuses),
    and rows leave only through the retention trim (accounts.audit.audit_trim, on the task queue)."""

    OUTCOMES = [("success", "success"), ("failure", "failure"), ("refused", "refused")]

    time = models.DateTimeField(auto_now_add=True, db_index=True)
    action = models.CharField(max_length=40, db_index=True)
    outcome = models.CharField(max_length=10, choices=OUTCOMES)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+")
    actor_name = models.CharField(max_length=150, blank=True)
    ip = models.CharField(max_length=64, blank=True)
    user_agent = models.CharField(max_length=256, blank=True)
    door = models.CharField(max_length=10)
    target = models.CharField(max_length=200, blank=True)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-time", "-id"]

    def __str__(self) -> str:
        return f"{self.time:%Y-%m-%d %H:%M:%S} {self.action} {self.outcome} {self.actor_name}"

    def save(self, *args, **kwargs) -> None:
        if self.pk is not None:
            raise ValueError("Audit events are append-only.")
        super().save(*args, **kwargs)

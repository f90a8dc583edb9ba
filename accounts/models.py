from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models


def _all_tools() -> list[str]:
    return ["*"]


class AgentConfig(models.Model):
    """The agent's configuration: one row (pk=1), edited through /api/config and Django admin."""

    PROVIDERS = [("openai", "OpenAI-compatible"), ("anthropic", "Anthropic"), ("offline", "Offline (no LLM)")]
    STT_PROVIDERS = [("hosted", "Hosted"), ("local", "Local"), ("browser", "Browser")]
    TTS_PROVIDERS = [("hosted", "Hosted"), ("edge", "Edge"), ("local", "Local"), ("browser", "Browser")]
    COMPAT_AUTH = [("public", "Public"), ("token", "Token")]

    provider = models.CharField(max_length=20, choices=PROVIDERS, default="offline")
    base_url = models.CharField(max_length=500, blank=True, default="")
    api_key = models.CharField(max_length=500, blank=True, default="")
    model = models.CharField(max_length=200, blank=True, default="")
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
        return f"Agent configuration ({self.provider})"


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

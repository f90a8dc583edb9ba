"""Identity's rows: API keys, revoked access tokens, and the audit log (users are Django's own)."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models


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
    and rows leave only through the retention trim (accounts.audit.audit_trim, on the task queue). The one
    exception: a coalesced row (its `bucket` set) counts the like events of its minute in `count`, which only
    grows, by a queryset update (accounts.audit.audit_store)."""

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
    count = models.PositiveIntegerField(default=1, help_text="The like events this row stands for (coalesced "
                                                             "within its minute).")
    bucket = models.CharField(max_length=64, blank=True, default="", help_text=(
        "For a coalesced event: what like events of its minute share (agentsite.core.audit.bucket_of)."))

    class Meta:
        ordering = ["-time", "-id"]
        constraints = [models.UniqueConstraint(fields=["bucket"], condition=~models.Q(bucket=""),
                                               name="audit_one_row_per_bucket")]

    def __str__(self) -> str:
        return f"{self.time:%Y-%m-%d %H:%M:%S} {self.action} {self.outcome} {self.actor_name}"

    def save(self, *args, **kwargs) -> None:
        if self.pk is not None:
            raise ValueError("Audit events are append-only.")
        super().save(*args, **kwargs)
# The limits a budget may set: absent or null means no limit. `validate_budget` is the one check, for
# a key's budget and a user's alike.
BUDGET_FIELDS = ("tokens_per_day", "tokens_per_month", "cost_per_day", "cost_per_month", "requests_per_minute",
                 "tokens_per_minute")


def validate_budget(value: object) -> None:
    """A budget is null or an object whose keys are among BUDGET_FIELDS, each a non-negative number or null.
    Raises django's ValidationError naming the offending key."""
    if value is None:
        return
    if not isinstance(value, dict):
        raise ValidationError("A budget is an object (or null).")
    unknown = sorted(set(value) - set(BUDGET_FIELDS))
    if unknown:
        raise ValidationError(f"Unknown budget field(s): {', '.join(map(str, unknown))}; known: "
                              f"{', '.join(BUDGET_FIELDS)}.")
    for name, limit in value.items():
        if limit is None:
            continue
        if isinstance(limit, bool) or not isinstance(limit, int | float) or limit != limit or limit < 0 \
                or limit == float("inf"):
            raise ValidationError(f"Budget field {name} must be a non-negative number or null.")


class ApiKey(models.Model):
    """A user's API key: the secret `ask-<random>` is shown once, when created; only its SHA-256
    (`hash`) is kept, and `prefix` (its first characters) to tell keys apart in a list.

    A key acts as its user, within its `scopes` (SCOPES): `v1` the OpenAI-compatible API, `mcp` the MCP server,
    `a2a` the agents' A2A endpoints (/a2a/<slug>), `api` the /api endpoints (never admin operations), `admin`
    (given only by an admin to their own key) the admin operations too. It stops at `expires_at`, when revoked
    (`revoked`, kept for the list and the usage records), and with its user's deactivation, deletion or password
    change (`password_version`, checked in accounts.authentication).
    `budget` (null: none) caps what the key spends, within its user's budget (shape: BUDGET_FIELDS).
    `created_by_key`: the key whose request made this one (null: made with a dashboard token). A minted key
    never has more than its parent (scopes a subset, a budget no looser, an expiry no later:
    accounts.services.key_create), and revoking a key revokes every key below it.
    """

    SCOPES = ("v1", "mcp", "a2a", "api", "admin")
    SECRET_PREFIX = "ask-"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16)
    hash = models.CharField(max_length=64, unique=True)
    # accounts.tokens.password_version of the user when the key was made: a password change (by any means:
    # the API, Django admin, manage.py changepassword) stops the key, as it stops the user's tokens.
    password_version = models.CharField(max_length=64, default="")
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked = models.BooleanField(default=False)
    revoked_at = models.DateTimeField(null=True, blank=True)
    budget = models.JSONField(null=True, blank=True, default=None, validators=[validate_budget])
    # CASCADE: a key deleted (Django admin) takes the keys it minted with it, as its revocation revokes them.
    created_by_key = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE,
                                       related_name="minted", help_text="The key that made this key (null: none).")

    class Meta:
        indexes = [models.Index(fields=["user", "created_at"])]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class BreakGlass(models.Model):
    """A user who may sign in with a password while AGENTSITE_PASSWORD_LOGIN=0 (accounts.backends): the operator's
    way in when the identity provider is broken. Set only by `manage.py breakglass` (a shell on the server), and by
    the first start for the initial admin; cleared by the command, or in the Django admin, which grants nothing."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="break_glass")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "break-glass user"

    def __str__(self) -> str:
        return f"break-glass: {self.user_id}"

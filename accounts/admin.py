"""Django admin for identity: API keys (revocable, never shown), the read-only audit log and the read-only list of
break-glass users (set only by `manage.py breakglass`)."""

from django.contrib import admin
from django.utils import timezone

from accounts.models import ApiKey, AuditEvent, BreakGlass
from accounts.services import key_revoke


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """Read-only: the audit log is append-only (accounts.models.AuditEvent)."""

    list_display = ["time", "action", "outcome", "actor_name", "ip", "door", "target", "count"]
    list_filter = ["action", "outcome", "door"]
    search_fields = ["actor_name", "target", "ip"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Operators see and revoke keys here too (the secret is never stored; `hash` is its SHA-256). A save or a
    deletion stops the key at once in every process, as DELETE /api/keys/:id does."""

    list_display = ["name", "user", "prefix", "scopes", "created_at", "expires_at", "last_used_at", "revoked"]
    list_filter = ["revoked"]
    search_fields = ["name", "prefix", "user__username"]
    fields = ["user", "name", "prefix", "scopes", "created_at", "expires_at", "last_used_at", "revoked",
              "revoked_at", "budget", "created_by_key"]
    readonly_fields = ["user", "prefix", "scopes", "created_at", "last_used_at", "revoked_at", "created_by_key"]

    def has_add_permission(self, request) -> bool:
        return False  # a key is made through the API, which shows its secret once

    def save_model(self, request, obj, form, change) -> None:
        if obj.revoked and obj.revoked_at is None:
            obj.revoked_at = timezone.now()
        super().save_model(request, obj, form, change)
        if obj.revoked:  # the keys it made go with it, as with DELETE /api/keys/:id
            key_revoke(key=obj)


@admin.register(BreakGlass)
class BreakGlassAdmin(admin.ModelAdmin):
    """Who may sign in with a password while AGENTSITE_PASSWORD_LOGIN=0. Only `manage.py breakglass` (a shell on
    the server) sets the flag, so that an account signed in through the web cannot give itself or anyone a way
    round single sign-on. Taking it away here is allowed: it grants nothing (an admin could deactivate the user
    anyway), and deleting a break-glass user in the admin takes their flag with them."""

    list_display = ["user", "created_at"]
    search_fields = ["user__username"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

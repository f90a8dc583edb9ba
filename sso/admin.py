"""Linked identities in the Django admin: read and delete (deleting one unlinks the subject; its next sign-in
makes or links an account again)."""

from django.contrib import admin

from sso.models import Identity


@admin.register(Identity)
class IdentityAdmin(admin.ModelAdmin):
    list_display = ("user", "subject", "issuer", "email", "last_login_at")
    search_fields = ("subject", "email", "user__username")
    readonly_fields = ("user", "issuer", "subject", "email", "created_at", "last_login_at")

    def has_add_permission(self, request) -> bool:
        return False

from django.contrib import admin

from agentsite.models import ServiceProcess


@admin.register(ServiceProcess)
class ServiceProcessAdmin(admin.ModelAdmin):
    """Read-only: the processes that own running work, with their last heartbeat."""

    list_display = ["command", "pid", "host", "started_at", "seen_at"]
    ordering = ["-seen_at"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

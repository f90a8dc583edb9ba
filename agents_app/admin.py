"""Django admin for agents: a save there is a version like one through the API (the history stays whole)."""

from django.contrib import admin

from agents_app.models import DEFAULT_SLUG, Agent, AgentGrant, AgentVersion
from agents_app.services import admin_saved


class AgentGrantInline(admin.TabularInline):
    model = AgentGrant
    extra = 0
    autocomplete_fields = ()


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "owner", "visibility", "model", "version", "updated_at")
    list_filter = ("visibility",)
    search_fields = ("slug", "name", "description")
    readonly_fields = ("version", "created_at", "updated_at")
    inlines = [AgentGrantInline]

    def get_readonly_fields(self, request, obj=None):
        """The agent `default` keeps its slug and stays the deployment's (no owner), as through the API."""
        if obj is not None and obj.is_default:
            return (*self.readonly_fields, "slug", "owner")
        return self.readonly_fields

    def has_delete_permission(self, request, obj=None):
        if obj is not None and obj.is_default:
            return False
        return super().has_delete_permission(request, obj)

    def delete_queryset(self, request, queryset):
        """The list's bulk delete leaves the agent `default` (the API refuses it with 409)."""
        super().delete_queryset(request, queryset.exclude(slug=DEFAULT_SLUG))

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        admin_saved(obj, request.user)


@admin.register(AgentVersion)
class AgentVersionAdmin(admin.ModelAdmin):
    list_display = ("agent", "number", "note", "author", "created_at")
    readonly_fields = ("agent", "number", "data", "note", "author", "created_at")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

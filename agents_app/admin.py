"""Django admin for agents: a save there is a version like one through the API (the history stays whole)."""

from django.contrib import admin

from agents_app.models import Agent, AgentGrant, AgentVersion


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

    def save_model(self, request, obj, form, change):
        from agents_app.services import admin_saved

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

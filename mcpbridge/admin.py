from django.contrib import admin

from mcpbridge.models import McpServer


@admin.register(McpServer)
class McpServerAdmin(admin.ModelAdmin):
    list_display = ["name", "transport", "status", "target", "created_at"]
    list_filter = ["transport", "status"]
    search_fields = ["name", "command", "url"]
    readonly_fields = ["status", "error", "tools", "created_at", "updated_at"]
    fields = ["name", "transport", "command", "args", "env", "url", "headers", "status", "error", "tools",
              "created_at", "updated_at"]

    @admin.display(description="command or URL")
    def target(self, server: McpServer) -> str:
        return server.url or " ".join([server.command, *map(str, server.args or [])])

from django.contrib import admin

from mcpbridge.models import McpServer, masked_url


@admin.register(McpServer)
class McpServerAdmin(admin.ModelAdmin):
    """`args`, `env` and `headers` are write-only here too: shown as counts and names, set through the API."""

    list_display = ["name", "transport", "visibility", "status", "target", "created_at"]
    list_filter = ["transport", "visibility", "status"]
    search_fields = ["name", "command", "url"]
    filter_horizontal = ["users"]
    readonly_fields = ["transport", "command", "arguments", "environment", "address", "header_names", "status",
                       "error", "tools", "created_at", "updated_at"]
    fields = ["name", "transport", "command", "arguments", "environment", "address", "header_names", "visibility",
              "users", "status", "error", "tools", "created_at", "updated_at"]

    @admin.display(description="command or URL")
    def target(self, server: McpServer) -> str:
        return masked_url(server.url) if server.url else server.command

    @admin.display(description="URL")
    def address(self, server: McpServer) -> str:
        return masked_url(server.url) if server.url else "-"

    @admin.display(description="args")
    def arguments(self, server: McpServer) -> str:
        return f"{len(server.args or [])} set (not shown)"

    @admin.display(description="env")
    def environment(self, server: McpServer) -> str:
        return ", ".join(sorted(server.env or {})) or "-"

    @admin.display(description="headers")
    def header_names(self, server: McpServer) -> str:
        return ", ".join(sorted(server.headers or {})) or "-"

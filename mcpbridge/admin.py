from django.contrib import admin

from mcpbridge.models import McpServer, masked_url
from organisation.access import rule_of


@admin.register(McpServer)
class McpServerAdmin(admin.ModelAdmin):
    """`args`, `env` and `headers` are write-only here too: shown as counts and names, set through the API. So is
    the access rule (PUT /api/mcp/servers/<name>/access: checked, audited, viewer grants only)."""

    list_display = ["name", "transport", "visibility", "status", "target", "created_at"]
    list_filter = ["transport", "visibility", "status"]
    search_fields = ["name", "command", "url"]
    readonly_fields = ["transport", "command", "arguments", "environment", "address", "header_names", "visibility",
                       "access", "status", "error", "tools", "created_at", "updated_at"]
    fields = ["name", "transport", "command", "arguments", "environment", "address", "header_names", "visibility",
              "access", "status", "error", "tools", "created_at", "updated_at"]

    @admin.display(description="grants")
    def access(self, server: McpServer) -> str:
        grants = rule_of(server)["grants"]
        return ", ".join(f"{'group' if 'group' in grant else 'user'} {grant['name']} ({grant['role']})"
                         for grant in grants) or "-"

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

from django.apps import AppConfig


class McpbridgeConfig(AppConfig):
    name = "mcpbridge"
    verbose_name = "MCP"
    default_auto_field = "django.db.models.BigAutoField"

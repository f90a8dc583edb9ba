from django.apps import AppConfig

from agentsite.agent.tools import registry
from agentsite.core.mounts import MOUNTS
from mcpbridge.paths import MCP_PATH


class McpbridgeConfig(AppConfig):
    name = "mcpbridge"
    verbose_name = "MCP"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported once the app registry is ready: the source reads McpServer rows.
        from mcpbridge.models import McpServer
        from mcpbridge.selectors import server_names
        from mcpbridge.source import McpToolSource
        from organisation.policy import ResourceKind, register

        # Who may use a server is the organisation's rule; editing one spawns processes, so it stays with the
        # admins and a grant gives use only. The access routes name a server by its name, as every MCP route does.
        register(ResourceKind(kind="mcp_server", model=McpServer, label="MCP server", roles=("viewer",),
                              lookup="name"))

        # External servers' tools join the registry as `<server>__<tool>`; connections open lazily on use.
        registry.register_source(McpToolSource())
        # The stored servers' names are kept per process (mcpbridge.selectors.server_names): each save (a rename
        # included) and delete drops them, the admin's and the shell's too.
        server_names.follows(McpServer)
        if not any(prefix == MCP_PATH for prefix, _factory in MOUNTS):
            MOUNTS.append((MCP_PATH, _mcp_asgi_app))


def _mcp_asgi_app():
    # Imported when the ASGI application is built, so that other processes never import the mcp server side.
    from mcpbridge.asgi import mcp_asgi_app

    return mcp_asgi_app()

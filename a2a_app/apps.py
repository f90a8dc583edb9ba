"""The A2A app: every agent an A2A server at /a2a/<slug> (a2a_app.server, mounted next to Django as /mcp is),
and remote A2A agents registered as tools (a2a_app.remotes, the tool source `a2a`)."""

from django.apps import AppConfig

from a2a_app.paths import A2A_PATH
from agentsite.core.mounts import MOUNTS


class A2AConfig(AppConfig):
    name = "a2a_app"
    verbose_name = "A2A"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported once the app registry is ready: these modules import the models.
        from a2a_app.models import A2ARemote
        from a2a_app.remotes import A2AToolSource, any_remote
        from a2a_app.sweep import tasks_mark_failed
        from agentsite.agent.tools import registry
        from agentsite.core.processes import on_process_death
        from organisation.policy import ResourceKind, register

        # As an MCP server: the deployment's, changed by admins only; a grant gives use.
        register(ResourceKind(kind="a2a_remote", model=A2ARemote, label="A2A remote agent", roles=("viewer",)))
        # A task whose process died ends `failed` (its run is gone), so no caller waits on it for ever.
        on_process_death("a2a tasks", tasks_mark_failed)
        # Each remote the caller may use is the tool a2a_<name>; asked after mcp and workflows (INSTALLED_APPS).
        registry.register_source(A2AToolSource())
        # Whether any remote exists is kept per process (a2a_app.remotes.any_remote): each save and delete drops it.
        any_remote.follows(A2ARemote)
        if not any(prefix == A2A_PATH for prefix, _factory in MOUNTS):
            MOUNTS.append((A2A_PATH, _a2a_asgi_app))


def _a2a_asgi_app():
    # Imported when the ASGI application is built: a2a-sdk's server side (~20 MiB) only where it serves.
    from a2a_app.server.asgi import a2a_asgi_app

    return a2a_asgi_app()

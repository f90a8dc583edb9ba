from django.apps import AppConfig

from agentsite.core.bodygate import BODY_GATES


class CompatConfig(AppConfig):
    name = "compat"
    verbose_name = "OpenAI-compatible API"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        async def gate(scope):
            # compat.http imports the ORM's models: not before the apps are ready.
            from compat.http import gate as v1_gate

            return await v1_gate(scope)

        BODY_GATES.append(("/v1/", gate))
        # The doors' routes import their views, which import the ORM's models: only once the apps are ready.
        from compat.doors import install_error_shapes

        install_error_shapes()

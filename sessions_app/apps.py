from django.apps import AppConfig


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Chat sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Django's app registry: the services import the models, ready only in ready().
        from agentsite.core.processes import on_process_death
        from sessions_app import stops
        from sessions_app.services import replies_mark_interrupted

        on_process_death("streaming replies", replies_mark_interrupted)
        stops.connect()

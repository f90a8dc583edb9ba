from django.apps import AppConfig
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models.signals import post_migrate


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
        post_migrate.connect(_search_index_ensured, sender=self)


def _search_index_ensured(using: str = DEFAULT_DB_ALIAS, **kwargs: object) -> None:
    """A later migration that rebuilt the sessions or messages table on SQLite took the index's triggers with
    it: they are made again and the index refilled (sessions_app.search.index_ensure)."""
    from sessions_app.search import index_ensure  # the models are ready only after ready()

    index_ensure(connections[using])

"""The catalogue app: on start, it hands the runtime its settings loader (the cached config and catalogue) and
drops that cache in every process whenever a config, connection or alias row changes."""

from django.apps import AppConfig
from django.db import transaction

from agentsite.core import invalidation


class CatalogueConfig(AppConfig):
    name = "catalogue"
    verbose_name = "LLM catalogue and config"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Here, not at the module top: models and the runtime load only once the app registry is ready.
        from django.db.models.signals import post_delete, post_save

        from agentsite.agent.config import set_settings_loader
        from agentsite.agent.routing import COOLING_TOPIC, cool_entry, forget_connection
        from catalogue import selectors
        from catalogue.models import AgentConfig, Connection, ModelAlias

        set_settings_loader(selectors.settings_get, peek=selectors.settings_peek)
        invalidation.subscribe(selectors.TOPIC, selectors.config_cache_clear)
        invalidation.subscribe("connection", forget_connection)
        invalidation.subscribe(COOLING_TOPIC, cool_entry)
        for name, signal in (("save", post_save), ("delete", post_delete)):
            # Connections and aliases are read with the config (the model catalogue): the same cache and topic.
            for model in (AgentConfig, Connection, ModelAlias):
                signal.connect(_config_changed, sender=model, dispatch_uid=f"catalogue-{model.__name__}-{name}")
            signal.connect(_connection_changed, sender=Connection, dispatch_uid=f"catalogue-connection-cool-{name}")


def _config_changed(sender, instance, **kwargs) -> None:
    _changed("config", None)


def _connection_changed(sender, instance, **kwargs) -> None:
    """A changed, deleted or re-created connection starts without the old one's cool-downs (routing.Router)."""
    _changed("connection", instance.name)


def _changed(topic: str, key) -> None:
    """Dropped here at once (even inside a transaction that may yet roll back: a drop only costs a reload),
    and announced everywhere once committed."""
    invalidation.drop_here(topic, key)
    transaction.on_commit(lambda: invalidation.announce(topic, key))

from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts and config"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model
        from django.db.models.signals import post_delete, post_save

        from accounts import selectors
        from accounts.authentication import keys, users
        from accounts.models import AgentConfig, ApiKey, Connection, ModelAlias
        from agentsite.agent.config import set_settings_loader
        from agentsite.agent.routing import forget_connection
        from agentsite.core import invalidation

        set_settings_loader(selectors.settings_get, peek=selectors.settings_peek)
        invalidation.subscribe(users.TOPIC, users.drop)
        invalidation.subscribe(keys.TOPIC, keys.drop)
        invalidation.subscribe(selectors.TOPIC, selectors.config_cache_clear)
        invalidation.subscribe("connection", forget_connection)
        user_model = get_user_model()
        for name, signal in (("save", post_save), ("delete", post_delete)):
            signal.connect(_user_changed, sender=user_model, dispatch_uid=f"accounts-user-{name}")
            signal.connect(_config_changed, sender=AgentConfig, dispatch_uid=f"accounts-config-{name}")
            signal.connect(_key_changed, sender=ApiKey, dispatch_uid=f"accounts-apikey-{name}")
            # Connections and aliases are read with the config (the model catalogue): the same cache and topic.
            signal.connect(_config_changed, sender=Connection, dispatch_uid=f"accounts-connection-{name}")
            signal.connect(_connection_changed, sender=Connection, dispatch_uid=f"accounts-connection-cool-{name}")
            signal.connect(_config_changed, sender=ModelAlias, dispatch_uid=f"accounts-alias-{name}")


def _user_changed(sender, instance, **kwargs) -> None:
    _changed("user", instance.pk)


def _key_changed(sender, instance, **kwargs) -> None:
    _changed("apikey", instance.hash)


def _config_changed(sender, instance, **kwargs) -> None:
    _changed("config", None)


def _connection_changed(sender, instance, **kwargs) -> None:
    """A changed, deleted or re-created connection starts without the old one's cool-downs (routing.Router)."""
    _changed("connection", instance.name)


def _changed(topic: str, key) -> None:
    """Dropped here at once (even inside a transaction that may yet roll back: a drop only costs a reload),
    and announced everywhere once committed."""
    from django.db import transaction

    from agentsite.core import invalidation

    invalidation.drop_here(topic, key)
    transaction.on_commit(lambda: invalidation.announce(topic, key))

"""The oauth app: agentsite as an OAuth 2.1 authorization server for its MCP endpoint (docs/api.md, MCP
authorization). A token's cached entry is dropped in every process whenever its row changes."""

from django.apps import AppConfig
from django.db import transaction

from agentsite.core import invalidation


class OauthConfig(AppConfig):
    name = "oauth"
    verbose_name = "OAuth (connected apps)"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Here, not at the module top: models load only once the app registry is ready.
        from django.db.models.signals import post_delete, post_save

        from agentsite.core.errors import register_error_shape
        from oauth.models import AccessToken
        from oauth.tokens import tokens
        from oauth.views import ERROR_SHAPE

        register_error_shape(ERROR_SHAPE)
        invalidation.subscribe(tokens.TOPIC, tokens.drop)
        for name, signal in (("save", post_save), ("delete", post_delete)):
            signal.connect(_token_changed, sender=AccessToken, dispatch_uid=f"oauth-token-{name}")


def _token_changed(sender, instance, **kwargs) -> None:
    """Dropped here at once, announced everywhere once committed (as accounts does for keys)."""
    from oauth.tokens import tokens  # the app's modules import models: not at the top of apps.py

    invalidation.drop_here(tokens.TOPIC, instance.access_hash)
    transaction.on_commit(lambda: invalidation.announce(tokens.TOPIC, instance.access_hash))

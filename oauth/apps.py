"""The oauth app: agentsite as an OAuth 2.1 authorization server for its MCP endpoint (docs/api.md, MCP
authorization). A token's cached entry is dropped in every process whenever its row changes, and a user's
password change or deactivation, however it is made (the API, Django admin, manage.py changepassword, a
shell), revokes the user's tokens it ends."""

from django.apps import AppConfig
from django.db import transaction

from agentsite.core import invalidation

# The fields of a user whose change can end their tokens (a save naming only others, a login's last_login, cannot).
USER_FIELDS_THAT_END_TOKENS = frozenset({"password", "is_active"})


class OauthConfig(AppConfig):
    name = "oauth"
    verbose_name = "OAuth (connected apps)"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Here, not at the module top: models load only once the app registry is ready.
        from django.contrib.auth import get_user_model
        from django.db.models.signals import post_delete, post_save

        from agentsite.core.errors import register_error_shape
        from oauth.models import AccessToken
        from oauth.tokens import tokens
        from oauth.views import ERROR_SHAPE

        register_error_shape(ERROR_SHAPE)
        invalidation.subscribe(tokens.TOPIC, tokens.drop)
        for name, signal in (("save", post_save), ("delete", post_delete)):
            signal.connect(_token_changed, sender=AccessToken, dispatch_uid=f"oauth-token-{name}")
        post_save.connect(_user_saved, sender=get_user_model(), dispatch_uid="oauth-user-save")


def _token_changed(sender, instance, **kwargs) -> None:
    """Dropped here at once, announced everywhere once committed (as accounts does for keys)."""
    from oauth.tokens import tokens  # the app's modules import models: not at the top of apps.py

    invalidation.drop_here(tokens.TOPIC, instance.access_hash)
    transaction.on_commit(lambda: invalidation.announce(tokens.TOPIC, instance.access_hash))


def _user_saved(sender, instance, created=False, update_fields=None, **kwargs) -> None:
    """A signal, not a call in each place a password or is_active changes: Django admin and manage.py
    changepassword change them too, and only the save is common to every way."""
    if created or (update_fields is not None and not USER_FIELDS_THAT_END_TOKENS & set(update_fields)):
        return
    from oauth.services import user_tokens_end  # imports oauth.server (Authlib): not at the top of apps.py

    user_tokens_end(user=instance)

"""The sso app: sign-in through the organisation's OpenID Connect provider (docs/sso.md). Nothing to start: the
provider's discovery document and keys are fetched on the first sign-in of each process (sso.provider)."""

from django.apps import AppConfig


class SsoConfig(AppConfig):
    name = "sso"
    verbose_name = "Single sign-on"
    default_auto_field = "django.db.models.BigAutoField"

from django.apps import AppConfig


class CompatConfig(AppConfig):
    name = "compat"
    verbose_name = "OpenAI-compatible API"
    default_auto_field = "django.db.models.BigAutoField"

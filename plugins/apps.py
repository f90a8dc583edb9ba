from django.apps import AppConfig


class PluginsConfig(AppConfig):
    name = "plugins"
    verbose_name = "Plugins"
    default_auto_field = "django.db.models.BigAutoField"

from django.apps import AppConfig


class PluginsConfig(AppConfig):
    name = "plugins"
    verbose_name = "Plugins"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Django's app registry: the loader and its services import the models, ready only in ready().
        from agentsite.agent.tools import registry
        from plugins.loader import PluginToolSource
        from plugins.services import plugin_loader

        # Every plugin's tools (listed under `plugin:<name>`); the first listing in a process loads the plugin
        # directory and starts watching it (plugins/services.py).
        registry.register_source(PluginToolSource(plugin_loader))

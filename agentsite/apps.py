from django.apps import AppConfig


class AgentsiteConfig(AppConfig):
    name = "agentsite"
    verbose_name = "agentsite"

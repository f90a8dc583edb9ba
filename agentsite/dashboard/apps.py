from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "agentsite.dashboard"
    label = "dashboard"
    verbose_name = "dashboard"

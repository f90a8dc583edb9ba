from django.urls import path

from plugins import api

urlpatterns = [
    path("plugins", api.PluginListView.as_view(), name="plugins"),
    path("plugins/reload", api.PluginReloadView.as_view(), name="plugins-reload"),
]

"""The /api routes of the catalogue: the config, connections, aliases and the model list."""

from django.urls import path

from catalogue import aliases_api, config_api, connections_api

urlpatterns = [
    path("config", config_api.ConfigView.as_view(), name="config"),
    path("connections", connections_api.ConnectionListView.as_view(), name="connections"),
    path("connections/<str:connection_id>", connections_api.ConnectionDetailView.as_view(), name="connection"),
    path("connections/<str:connection_id>/discover", connections_api.ConnectionDiscoverView.as_view(),
         name="connection-discover"),
    path("aliases", aliases_api.AliasListView.as_view(), name="aliases"),
    path("aliases/<str:alias_id>", aliases_api.AliasDetailView.as_view(), name="alias"),
    path("models", aliases_api.ModelsView.as_view(), name="models"),
]

from django.urls import path

from sessions_app import api, transfer_api

urlpatterns = [
    path("sessions", api.SessionListView.as_view(), name="session-list"),
    path("sessions/<uuid:pk>", api.SessionDetailView.as_view(), name="session-detail"),
    path("sessions/<uuid:pk>/messages", api.MessageListView.as_view(), name="session-messages"),
    path("sessions/<uuid:pk>/rename", api.SessionRenameView.as_view(), name="session-rename"),
    path("sessions/<uuid:pk>/chat", api.chat, name="session-chat"),
    path("sessions/<uuid:pk>/messages/<uuid:mid>/regenerate", api.regenerate, name="session-regenerate"),
    path("sessions/<uuid:pk>/messages/<uuid:mid>/stop", api.MessageStopView.as_view(), name="session-stop"),
    # Export and import (sessions_app.transfer).
    path("sessions/import", transfer_api.SessionImportView.as_view(), name="session-import"),
    path("sessions/<uuid:pk>/export", transfer_api.SessionExportView.as_view(), name="session-export"),
]

from django.urls import path

from agents_app import api
from organisation.access import access_urls

urlpatterns = [
    path("agents", api.AgentListView.as_view(), name="agent-list"),
    path("agents/<str:pk>", api.AgentDetailView.as_view(), name="agent-detail"),
    path("agents/<str:pk>/versions", api.VersionListView.as_view(), name="agent-versions"),
    path("agents/<str:pk>/versions/<str:number>", api.VersionDetailView.as_view(), name="agent-version"),
    path("agents/<str:pk>/versions/<str:number>/restore", api.VersionRestoreView.as_view(),
         name="agent-version-restore"),
    # GET/PUT .../access and POST .../transfer: the agent's access rule (organisation.access).
    *access_urls("agents", "agent", "str"),
]

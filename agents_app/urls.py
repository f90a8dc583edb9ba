from django.urls import path

from agents_app import api
from agentsite.core.validation import register_id_converter
from organisation.access import access_urls

register_id_converter()  # `<id:...>`: ids in ASCII digits only (any other segment names nothing: 404)

urlpatterns = [
    path("agents", api.AgentListView.as_view(), name="agent-list"),
    path("agents/<id:pk>", api.AgentDetailView.as_view(), name="agent-detail"),
    path("agents/<id:pk>/versions", api.VersionListView.as_view(), name="agent-versions"),
    path("agents/<id:pk>/versions/<str:number>", api.VersionDetailView.as_view(), name="agent-version"),
    path("agents/<id:pk>/versions/<str:number>/restore", api.VersionRestoreView.as_view(),
         name="agent-version-restore"),
    # GET/PUT .../access and POST .../transfer: the agent's access rule (organisation.access).
    *access_urls("agents", "agent", "id"),
]

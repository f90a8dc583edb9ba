"""/api/a2a/...: the remote A2A agents (admins register them; their access rule says who may use them as tools)."""

from django.urls import URLPattern, URLResolver, path

from a2a_app import api
from organisation.access import access_urls

urlpatterns: list[URLPattern | URLResolver] = [
    path("a2a/remotes", api.RemoteListView.as_view(), name="a2a-remotes"),
    path("a2a/remotes/<int:remote_id>", api.RemoteDetailView.as_view(), name="a2a-remote"),
    path("a2a/remotes/<int:remote_id>/refresh", api.RemoteRefreshView.as_view(), name="a2a-remote-refresh"),
    # GET/PUT a2a/remotes/<id>/access: the organisation's access rule (viewer grants only; no transfer, as a
    # remote has no owner but the deployment).
    *access_urls("a2a/remotes", "a2a_remote", "int", transferable=False),
]

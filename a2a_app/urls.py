"""/api/a2a/...: the remote A2A agents (admins register them; their access rule says who may use them as tools)."""

from django.urls import URLPattern, URLResolver

from organisation.access import access_urls

urlpatterns: list[URLPattern | URLResolver] = [
    # GET/PUT a2a/remotes/<id>/access: the organisation's access rule (viewer grants only; no transfer, as a
    # remote has no owner but the deployment).
    *access_urls("a2a/remotes", "a2a_remote", "int", transferable=False),
]

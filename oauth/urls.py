"""The /api routes of the oauth app: consents and connected apps. (The protocol's own routes, /oauth/* and the
/.well-known documents, are in `protocol_urls`, mounted at the root.)"""

from django.urls import path

from oauth import api, views
from oauth.resource import A2A

urlpatterns = [
    path("oauth/consents/<str:consent_id>", api.ConsentView.as_view(), name="oauth-consent"),
    path("oauth/apps", api.ConnectedAppListView.as_view(), name="oauth-apps"),
    path("oauth/apps/<str:client_id>", api.ConnectedAppDetailView.as_view(), name="oauth-app-detail"),
]

protocol_urls = [
    # RFC 9728: suffixed with each resource's path (where clients look first); the root form is /mcp's, as MCP
    # clients that know only the origin try it next.
    path(".well-known/oauth-protected-resource", views.ProtectedResourceMetadataView.as_view(),
         name="oauth-protected-resource"),
    path(".well-known/oauth-protected-resource/mcp", views.ProtectedResourceMetadataView.as_view(),
         name="oauth-protected-resource-mcp"),
    path(".well-known/oauth-protected-resource/a2a", views.ProtectedResourceMetadataView.as_view(resource=A2A),
         name="oauth-protected-resource-a2a"),
    path(".well-known/oauth-authorization-server", views.AuthorizationServerMetadataView.as_view(),
         name="oauth-authorization-server"),
    path("oauth/register", views.RegisterView.as_view(), name="oauth-register"),
    path("oauth/authorize", views.AuthorizeView.as_view(), name="oauth-authorize"),
    path("oauth/token", views.TokenView.as_view(), name="oauth-token"),
    path("oauth/revoke", views.RevokeView.as_view(), name="oauth-revoke"),
]

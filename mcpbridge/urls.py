from django.urls import path

from mcpbridge import api
from organisation.access import access_urls

urlpatterns = [
    path("mcp/tools", api.ToolListView.as_view(), name="mcp-tools"),
    path("mcp/servers", api.ServerListView.as_view(), name="mcp-servers"),
    path("mcp/servers/<str:name>", api.ServerDetailView.as_view(), name="mcp-server-detail"),
    path("mcp/servers/<str:name>/reconnect", api.ReconnectView.as_view(), name="mcp-server-reconnect"),
    path("mcp/connect", api.ConnectView.as_view(), name="mcp-connect"),
    path("mcp/oauth/callback", api.OAuthCallbackView.as_view(), name="mcp-oauth-callback"),
    path("mcp/disconnect", api.DisconnectView.as_view(), name="mcp-disconnect"),
    path("mcp/call", api.CallView.as_view(), name="mcp-call"),
    # GET/PUT mcp/servers/<name>/access: the organisation's access rule (viewer grants only; no transfer, as a
    # server has no owner but the deployment).
    *access_urls("mcp/servers", "mcp_server", "str", transferable=False),
]

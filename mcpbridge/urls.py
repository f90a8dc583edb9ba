from django.urls import path

from mcpbridge import api

urlpatterns = [
    path("mcp/tools", api.ToolListView.as_view(), name="mcp-tools"),
    path("mcp/servers", api.ServerListView.as_view(), name="mcp-servers"),
    path("mcp/servers/<str:name>", api.ServerDetailView.as_view(), name="mcp-server-detail"),
    path("mcp/connect", api.ConnectView.as_view(), name="mcp-connect"),
    path("mcp/disconnect", api.DisconnectView.as_view(), name="mcp-disconnect"),
    path("mcp/call", api.CallView.as_view(), name="mcp-call"),
]

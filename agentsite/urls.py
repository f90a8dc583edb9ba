from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from a2a_app import views as a2a_views
from agentsite.core.errors import error_response
from agentsite.core.meta import MetaView
from agentsite.dashboard.apidocs import ApiDocsView
from agentsite.dashboard.views import dashboard, favicon
from agentsite.health import HealthView, MetricsSummaryView, metrics_view
from agentsite.middleware import is_api_path
from oauth.urls import protocol_urls as oauth_protocol_urls
from workflows import hooks as workflows_hooks

urlpatterns = [
    # The OpenAI-compatible door first: Django tries the patterns in order, and every /v1 request would
    # otherwise be matched against each api/ include's patterns before its own (~40 us a request).
    path("v1/", include("compat.urls")),
    path("admin/", admin.site.urls),
    path("api/health", HealthView.as_view(), name="health"),
    path("api/metrics/summary", MetricsSummaryView.as_view(), name="metrics-summary"),
    path("api/meta", MetaView.as_view(), name="meta"),
    path("api/schema", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs", ApiDocsView.as_view(url_name="schema"), name="docs"),
    path("api/", include("accounts.urls")),
    path("api/", include("sso.urls")),
    path("api/", include("oauth.urls")),
    path("api/", include("organisation.urls")),
    path("api/", include("a2a_app.urls")),
    path("api/", include("catalogue.urls")),
    path("api/", include("sessions_app.urls")),
    path("api/", include("knowledge.urls")),
    path("api/", include("mcpbridge.urls")),
    path("api/", include("scheduler.urls")),
    path("api/", include("workflows.urls")),
    path("api/", include("agents_app.urls")),
    path("api/", include("voice.urls")),
    path("api/", include("uploads.urls")),
    path("api/", include("plugins.urls")),
    path("api/", include("usage.urls")),
    *oauth_protocol_urls,
    # A2A: the deployment's agent card (each agent's is served by the /a2a mount, a2a_app.server.asgi).
    path(".well-known/agent-card.json", a2a_views.DeploymentCardView.as_view(), name="a2a-deployment-card"),
    path("metrics", metrics_view, name="metrics"),
    path("hooks/<uuid:trigger_id>", workflows_hooks.hook, name="webhook"),
    path("favicon.ico", favicon, name="favicon"),
    path("", dashboard, name="dashboard"),
]


def _not_found(request: HttpRequest, exception=None):
    if request.path.startswith("/v1"):
        error = {"message": f"No route {request.path}.", "type": "invalid_request_error", "param": None,
                 "code": "not_found"}
        return JsonResponse({"error": error}, status=404)
    if is_api_path(request.path):
        return error_response("not_found", "Not found.", 404)
    return JsonResponse({"error": {"code": "not_found", "message": "Not found.", "details": {}}}, status=404)


def _server_error(request: HttpRequest):
    return error_response("internal_error", "The server failed; the error was logged.", 500)


handler404 = _not_found
handler500 = _server_error

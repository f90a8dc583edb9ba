"""The /api routes of identity: log-in, tokens, the caller, API keys and the audit log."""

from django.urls import path

from accounts import api, keys_api
from accounts.audit import AuditListView
from agentsite.core.validation import register_id_converter

register_id_converter()  # `<id:...>`: ids in ASCII digits only

urlpatterns = [
    path("auth/login", api.LoginView.as_view(), name="auth-login"),
    path("audit", AuditListView.as_view(), name="audit"),
    path("auth/register", api.RegisterView.as_view(), name="auth-register"),
    path("auth/options", api.AuthOptionsView.as_view(), name="auth-options"),
    path("auth/refresh", api.RefreshView.as_view(), name="auth-refresh"),
    path("auth/logout", api.LogoutView.as_view(), name="auth-logout"),
    path("auth/change-password", api.PasswordChangeView.as_view(), name="auth-change-password"),
    path("auth/me", api.MeView.as_view(), name="auth-me"),
    path("keys", keys_api.KeyListView.as_view(), name="keys"),
    path("keys/<id:pk>", keys_api.KeyDetailView.as_view(), name="key-detail"),
]

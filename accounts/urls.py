from django.urls import path

from accounts import api, keys_api

urlpatterns = [
    path("auth/login", api.LoginView.as_view(), name="auth-login"),
    path("auth/register", api.RegisterView.as_view(), name="auth-register"),
    path("auth/options", api.AuthOptionsView.as_view(), name="auth-options"),
    path("auth/refresh", api.RefreshView.as_view(), name="auth-refresh"),
    path("auth/logout", api.LogoutView.as_view(), name="auth-logout"),
    path("auth/change-password", api.PasswordChangeView.as_view(), name="auth-change-password"),
    path("auth/me", api.MeView.as_view(), name="auth-me"),
    path("config", api.ConfigView.as_view(), name="config"),
    path("keys", keys_api.KeyListView.as_view(), name="keys"),
    path("keys/<str:pk>", keys_api.KeyDetailView.as_view(), name="key-detail"),
]

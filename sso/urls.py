"""The /api routes of single sign-on (docs/api.md, Single sign-on)."""

from django.urls import path

from sso import views

urlpatterns = [
    path("auth/oidc/login", views.LoginView.as_view(), name="oidc-login"),
    path("auth/oidc/callback", views.CallbackView.as_view(), name="oidc-callback"),
    path("auth/oidc/session", views.SessionView.as_view(), name="oidc-session"),
    path("auth/oidc/logout", views.LogoutView.as_view(), name="oidc-logout"),
]

from django.urls import path

from usage import api

urlpatterns = [
    path("usage", api.UsageView.as_view(), name="usage"),
    path("usage/prices", api.PriceView.as_view(), name="usage-prices"),
    path("budget", api.BudgetView.as_view(), name="budget"),
    path("users", api.UserListView.as_view(), name="users"),
    path("users/<str:user_id>", api.UserDetailView.as_view(), name="user-detail"),
    path("users/<str:user_id>/budget", api.UserBudgetView.as_view(), name="user-budget"),
]

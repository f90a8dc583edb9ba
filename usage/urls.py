from django.urls import path

from agentsite.core.validation import register_id_converter
from usage import api, group_api

register_id_converter()  # `<id:...>`: ids in ASCII digits only

urlpatterns = [
    path("usage", api.UsageView.as_view(), name="usage"),
    path("usage/prices", api.PriceView.as_view(), name="usage-prices"),
    path("budget", api.BudgetView.as_view(), name="budget"),
    path("users", api.UserListView.as_view(), name="users"),
    path("users/<id:user_id>", api.UserDetailView.as_view(), name="user-detail"),
    path("users/<id:user_id>/budget", api.UserBudgetView.as_view(), name="user-budget"),
    path("groups/<id:group_id>/budget", group_api.GroupBudgetView.as_view(), name="group-budget"),
]

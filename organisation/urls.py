from django.urls import path

from agentsite.core.validation import register_id_converter
from organisation import api

register_id_converter()

urlpatterns = [
    path("groups", api.GroupListView.as_view(), name="groups"),
    path("groups/<id:group_id>", api.GroupDetailView.as_view(), name="group"),
    path("groups/<id:group_id>/members", api.MemberListView.as_view(), name="group-members"),
    path("groups/<id:group_id>/members/<id:user_id>", api.MemberDetailView.as_view(), name="group-member"),
]

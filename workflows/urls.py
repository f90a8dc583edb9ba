from django.urls import path

from organisation.access import access_urls
from workflows import api, hooks

urlpatterns = [
    path("approvals", api.ApprovalListView.as_view(), name="workflow-approval-list"),
    path("approvals/<uuid:approval_id>", api.ApprovalDecideView.as_view(), name="workflow-approval-decide"),
    path("workflows", api.WorkflowListView.as_view(), name="workflow-list"),
    path("workflows/import", api.ImportView.as_view(), name="workflow-import"),
    path("workflows/runs/<uuid:run_id>", api.RunDetailView.as_view(), name="workflow-run-detail"),
    path("workflows/<uuid:pk>", api.WorkflowDetailView.as_view(), name="workflow-detail"),
    path("workflows/<uuid:pk>/nodes", api.NodeCreateView.as_view(), name="workflow-nodes"),
    path("workflows/<uuid:pk>/run", api.run, name="workflow-run"),
    path("workflows/<uuid:pk>/runs", api.RunListView.as_view(), name="workflow-runs"),
    path("workflows/<uuid:pk>/versions", api.VersionListView.as_view(), name="workflow-versions"),
    path("workflows/<uuid:pk>/versions/<str:number>", api.VersionDetailView.as_view(), name="workflow-version"),
    path("workflows/<uuid:pk>/versions/<str:number>/restore", api.VersionRestoreView.as_view(),
         name="workflow-version-restore"),
    path("workflows/<uuid:pk>/triggers", hooks.TriggerListView.as_view(), name="workflow-triggers"),
    path("workflows/<uuid:pk>/triggers/<uuid:trigger_id>", hooks.TriggerDetailView.as_view(),
         name="workflow-trigger"),
    path("workflows/<uuid:pk>/triggers/<uuid:trigger_id>/rotate", hooks.TriggerRotateView.as_view(),
         name="workflow-trigger-rotate"),
    path("workflows/<uuid:pk>/export", api.ExportView.as_view(), name="workflow-export"),
    # GET/PUT .../access and POST .../transfer: the workflow's access rule (organisation.access).
    *access_urls("workflows", "workflow", "uuid"),
]

from django.urls import path

from scheduler import api

urlpatterns = [
    path("scheduler/tasks", api.TaskListView.as_view(), name="scheduler-tasks"),
    path("scheduler/tasks/<uuid:pk>", api.TaskDetailView.as_view(), name="scheduler-task"),
    path("scheduler/run/<uuid:pk>", api.RunNowView.as_view(), name="scheduler-run"),
    path("scheduler/history", api.HistoryView.as_view(), name="scheduler-history"),
    path("scheduler/preview", api.PreviewView.as_view(), name="scheduler-preview"),
]

"""/api/upload and /api/uploads/<id>: store a file, list the caller's, read or delete one."""

from django.urls import path

from uploads import api

urlpatterns = [
    path("upload", api.UploadCreateView.as_view(), name="upload"),
    path("uploads", api.UploadListView.as_view(), name="uploads"),
    path("uploads/<uuid:pk>", api.UploadDetailView.as_view(), name="upload-detail"),
]

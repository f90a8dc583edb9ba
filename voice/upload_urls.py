from django.urls import path

from voice import upload_api

urlpatterns = [
    path("upload", upload_api.UploadCreateView.as_view(), name="upload"),
    path("uploads", upload_api.UploadListView.as_view(), name="uploads"),
    path("uploads/<uuid:pk>", upload_api.UploadDetailView.as_view(), name="upload-detail"),
]

from django.urls import path

from knowledge import api

urlpatterns = [
    path("kb/documents", api.DocumentListView.as_view(), name="kb-documents"),
    path("kb/documents/<uuid:pk>", api.DocumentDetailView.as_view(), name="kb-document"),
    path("kb/search", api.SearchView.as_view(), name="kb-search"),
    path("kb/context", api.ContextView.as_view(), name="kb-context"),
    path("kb/clear", api.ClearView.as_view(), name="kb-clear"),
]

from django.urls import path

from knowledge import api
from organisation.access import access_urls

urlpatterns = [
    path("kb/collections", api.CollectionListView.as_view(), name="kb-collections"),
    path("kb/collections/<uuid:pk>", api.CollectionDetailView.as_view(), name="kb-collection"),
    *access_urls("kb/collections", "collection", "uuid"),
    path("kb/documents", api.DocumentListView.as_view(), name="kb-documents"),
    path("kb/documents/<uuid:pk>", api.DocumentDetailView.as_view(), name="kb-document"),
    path("kb/search", api.SearchView.as_view(), name="kb-search"),
    path("kb/context", api.ContextView.as_view(), name="kb-context"),
    path("kb/clear", api.ClearView.as_view(), name="kb-clear"),
]

"""The Responses door's routes (compat.doors)."""

from compat.doors import Route
from compat.responses import schema, views

ROUTES = [
    Route("responses", views.create, "v1-responses", schema.ResponsesSchema),
    Route("responses/<str:pk>", views.one, "v1-response", schema.ResponseSchema),
    Route("responses/<str:pk>/input_items", views.input_items, "v1-response-input-items",
          schema.ResponseInputItemsSchema),
]

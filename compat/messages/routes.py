"""The Messages door's routes (compat.doors)."""

from compat.doors import Route
from compat.messages import schema, views

ROUTES = [
    Route("messages", views.messages, "v1-messages", schema.MessagesSchema),
    Route("messages/count_tokens", views.count_tokens, "v1-messages-count-tokens", schema.CountTokensSchema),
]

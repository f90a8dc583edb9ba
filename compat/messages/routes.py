"""The Messages door's routes (compat.doors)."""

from agentsite.core.errors import ErrorShape, anthropic_body
from compat.doors import Route
from compat.messages import schema, views

ROUTES = [
    Route("messages", views.messages, "v1-messages", schema.MessagesSchema),
    Route("messages/count_tokens", views.count_tokens, "v1-messages-count-tokens", schema.CountTokensSchema),
]
# Anthropic's error shape, so that the anthropic SDK raises the matching exception class.
ERROR_SHAPE = ErrorShape("/v1/messages", anthropic_body, schema.AnthropicErrorSerializer)

"""The chat door's routes (compat.doors)."""

from agentsite.core.errors import ErrorShape, openai_body
from compat.chat import schema, views
from compat.doors import Route

ROUTES = [
    Route("models", views.models, "v1-models", schema.ModelsSchema),
    Route("models/<path:model_id>", views.model, "v1-model", schema.ModelSchema),
    Route("chat/completions", views.chat_completions, "v1-chat-completions", schema.ChatCompletionsSchema),
    Route("embeddings", views.embeddings_view, "v1-embeddings", schema.EmbeddingsSchema),
]
# OpenAI's error shape is /v1's: every path under it a door of its own does not claim.
ERROR_SHAPE = ErrorShape("/v1", openai_body, schema.OpenAIErrorSerializer)

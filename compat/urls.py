from django.urls import path

from compat import api, messages

urlpatterns = [
    path("models", api.models, name="v1-models"),
    path("models/<path:model_id>", api.model, name="v1-model"),
    path("chat/completions", api.chat_completions, name="v1-chat-completions"),
    path("responses", api.responses_create, name="v1-responses"),
    path("responses/<str:pk>", api.responses_one, name="v1-response"),
    path("responses/<str:pk>/input_items", api.responses_input_items, name="v1-response-input-items"),
    path("messages", messages.messages, name="v1-messages"),
    path("messages/count_tokens", messages.count_tokens, name="v1-messages-count-tokens"),
    path("embeddings", api.embeddings, name="v1-embeddings"),
]

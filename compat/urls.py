from django.urls import path

from compat import api

urlpatterns = [
    path("models", api.models, name="v1-models"),
    path("chat/completions", api.chat_completions, name="v1-chat-completions"),
    path("embeddings", api.embeddings, name="v1-embeddings"),
]

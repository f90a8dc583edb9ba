"""The voice app's routes under /api/: the speech ones (voice/speech/urls.py)."""

from django.urls import include, path

urlpatterns = [
    path("", include("voice.speech.urls")),
]

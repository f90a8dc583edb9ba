from django.urls import include, path

urlpatterns = [
    path("", include("voice.speech.urls")),
]

from django.urls import include, path

urlpatterns = [
    path("", include("voice.upload_urls")),
    path("", include("voice.speech.urls")),
]

"""Speech: preset voices, speech-to-text and text-to-speech providers."""

from django.urls import path

from voice.speech import api

urlpatterns = [
    path("voices", api.VoiceListView.as_view(), name="voice-list"),
    path("voice/stt", api.SpeechToTextView.as_view(), name="voice-stt"),
    path("voice/tts", api.TextToSpeechView.as_view(), name="voice-tts"),
]

"""The voice app: speech in and out (voice/speech/). It has no models; its migrations stay, since they created
the tables the uploads app now owns (uploads/migrations/0001_initial.py)."""

from django.apps import AppConfig


class VoiceConfig(AppConfig):
    name = "voice"
    verbose_name = "Voice"
    default_auto_field = "django.db.models.BigAutoField"

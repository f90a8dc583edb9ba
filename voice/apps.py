from django.apps import AppConfig


class VoiceConfig(AppConfig):
    name = "voice"
    verbose_name = "Voice"
    default_auto_field = "django.db.models.BigAutoField"

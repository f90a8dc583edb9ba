from django.apps import AppConfig


class VoiceConfig(AppConfig):
    name = "voice"
    verbose_name = "Voice and uploads"
    default_auto_field = "django.db.models.BigAutoField"

from django.apps import AppConfig


class VoiceConfig(AppConfig):
    name = "voice"
    verbose_name = "Voice and uploads"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from agentsite.core.startup import on_service_start
        from sessions_app.attachments import set_attachment_resolver
        from voice.selectors import attachment_parts_for
        from voice.services import uploads_sweep_orphans

        # Chat attachments are upload ids: this store turns the owner's into content parts (another's: 404).
        set_attachment_resolver(attachment_parts_for)
        on_service_start("upload files without a row", uploads_sweep_orphans)

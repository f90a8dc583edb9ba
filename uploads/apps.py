"""The uploads store: files a user uploads (/api/upload, /api/uploads), read back by their owner and turned into
the content parts of a chat turn."""

from django.apps import AppConfig

from agentsite.core.startup import on_service_start
from sessions_app.attachments import set_attachment_resolver


class UploadsConfig(AppConfig):
    name = "uploads"
    verbose_name = "Uploads"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Here, not at the top: both modules import the models, which can be imported only once the registry is ready.
        from uploads.selectors import attachment_parts_for
        from uploads.services import uploads_sweep_orphans

        # Chat attachments are upload ids: this store turns the owner's into content parts (another's: 404).
        set_attachment_resolver(attachment_parts_for)
        on_service_start("upload files without a row", uploads_sweep_orphans)

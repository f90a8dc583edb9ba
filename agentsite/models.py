from django.db import models


class ServiceProcess(models.Model):
    """A process of the service that owns running work (a workflow run, a scheduled run, a streaming reply):
    alive while its heartbeat is fresh (agentsite/core/processes.py)."""

    id = models.CharField(primary_key=True, max_length=200, help_text="<host>:<pid>:<start time>")
    host = models.CharField(max_length=200, help_text="Host name and boot id: pids are only compared on it.")
    pid = models.IntegerField()
    command = models.CharField(max_length=200, blank=True, default="")
    started_at = models.DateTimeField()
    seen_at = models.DateTimeField(help_text="Its last heartbeat.")

    class Meta:
        verbose_name = "service process"
        verbose_name_plural = "service processes"
        indexes = [models.Index(fields=["seen_at"], name="service_process_seen")]

    def __str__(self) -> str:
        return f"{self.command or 'process'} {self.pid} on {self.host}"

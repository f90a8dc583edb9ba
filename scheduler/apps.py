from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    name = "scheduler"
    verbose_name = "Scheduler"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from agentsite.core.processes import on_process_death
        from agentsite.core.startup import on_service_start
        from scheduler.services import runs_mark_crashed, tick_schedule_ensure

        on_process_death("scheduled runs", runs_mark_crashed)
        on_service_start("scheduler tick schedule", tick_schedule_ensure)

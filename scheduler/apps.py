from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    name = "scheduler"
    verbose_name = "Scheduler"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Django's app registry: the scheduler's modules import its models, ready only in ready().
        from django.db.models.signals import post_save

        from agentsite.core.processes import on_process_death
        from agentsite.core.startup import on_service_loop, on_service_start
        from scheduler import timer
        from scheduler.models import ScheduledTask
        from scheduler.services import runs_mark_crashed, task_saved, tick_schedule_ensure

        on_process_death("scheduled runs", runs_mark_crashed)
        on_service_start("scheduler tick schedule", tick_schedule_ensure)
        on_service_loop("scheduler timer", timer.run, wake=timer.wake)
        # Any save of a task (the API, Django admin) wakes the timers once committed; the tick's own updates
        # are raw SQL and wake nobody.
        post_save.connect(task_saved, sender=ScheduledTask, dispatch_uid="scheduler-task-saved")

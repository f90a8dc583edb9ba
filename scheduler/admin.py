from django.contrib import admin
from django_q.models import Schedule

from scheduler.models import ScheduledTask, TaskRun


class RunInline(admin.TabularInline):
    model = TaskRun
    fields = ["created_at", "trigger", "scheduled_for", "status", "error"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ["-created_at"]

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(ScheduledTask)
class ScheduledTaskAdmin(admin.ModelAdmin):
    list_display = ["name", "owner", "cron", "timezone", "model", "enabled", "next_run_at", "last_run_at"]
    list_filter = ["enabled", "missed"]
    search_fields = ["name", "prompt", "owner__username"]
    readonly_fields = ["next_run_at", "last_run_at", "created_at", "updated_at"]
    inlines = [RunInline]


@admin.register(TaskRun)
class TaskRunAdmin(admin.ModelAdmin):
    """Runs are records: they can be read and deleted, never edited."""

    list_display = ["task", "trigger", "scheduled_for", "status", "created_at"]
    list_filter = ["status", "trigger"]
    search_fields = ["task__name", "error"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


# django-q2's "Scheduled tasks" is the tick schedule that scheduler.services.tick_schedule_ensure creates and
# corrects at every start: editing it by hand would stop or flood the scheduler, and its name is the same as
# our own tasks'. Its queued, failed and successful task records stay in the admin (read for diagnosis).
# django_q is before this app in INSTALLED_APPS, so its admin module has registered the model by now.
admin.site.unregister(Schedule)

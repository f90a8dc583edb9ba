from django.contrib import admin

from workflows.models import Workflow, WorkflowEdge, WorkflowNode, WorkflowRun, WorkflowVersion
from workflows.services import version_record_live


class NodeInline(admin.TabularInline):
    model = WorkflowNode
    fields = ["order", "node_id", "type", "name", "config", "position_x", "position_y"]
    extra = 0


class EdgeInline(admin.TabularInline):
    model = WorkflowEdge
    fields = ["order", "source", "target"]
    extra = 0


@admin.register(Workflow)
class WorkflowAdmin(admin.ModelAdmin):
    list_display = ["name", "owner", "updated_at"]
    list_filter = ["owner"]
    search_fields = ["name", "description", "owner__username"]
    inlines = [NodeInline, EdgeInline]

    def save_related(self, request, form, formsets, change) -> None:
        super().save_related(request, form, formsets, change)
        version_record_live([form.instance.pk], "admin edit")


class GraphPartAdmin(admin.ModelAdmin):
    """A node or an edge edited alone still makes a new version of its workflow, which the next run runs (every
    process reads the version number: workflows.selectors.workflow_runnable)."""

    def _touch(self, workflow_ids) -> None:
        version_record_live(workflow_ids, "admin edit")

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        self._touch([obj.workflow_id])

    def delete_model(self, request, obj) -> None:
        super().delete_model(request, obj)
        self._touch([obj.workflow_id])

    def delete_queryset(self, request, queryset) -> None:
        workflow_ids = list(queryset.values_list("workflow_id", flat=True))
        super().delete_queryset(request, queryset)
        self._touch(workflow_ids)


@admin.register(WorkflowNode)
class WorkflowNodeAdmin(GraphPartAdmin):
    list_display = ["name", "type", "workflow", "node_id"]
    list_filter = ["type"]
    search_fields = ["name", "workflow__name"]


@admin.register(WorkflowEdge)
class WorkflowEdgeAdmin(GraphPartAdmin):
    list_display = ["workflow", "source", "target"]
    search_fields = ["workflow__name"]


@admin.register(WorkflowVersion)
class WorkflowVersionAdmin(admin.ModelAdmin):
    """Versions are records: read only (a restore goes through the API: it makes a new version)."""

    list_display = ["workflow", "number", "note", "created_at"]
    search_fields = ["workflow__name"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(WorkflowRun)
class WorkflowRunAdmin(admin.ModelAdmin):
    """Runs are records: they can be read and deleted, never edited."""

    list_display = ["id", "workflow", "owner", "status", "created_at", "finished_at"]
    list_filter = ["status"]
    search_fields = ["workflow__name", "owner__username"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

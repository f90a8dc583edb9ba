from django.contrib import admin
from django.utils import timezone

from workflows.models import Workflow, WorkflowEdge, WorkflowNode, WorkflowRun


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


class GraphPartAdmin(admin.ModelAdmin):
    """A node or an edge edited alone still moves its workflow's updated_at, which is how every process
    knows its cached graph is stale (workflows.selectors.workflow_runnable)."""

    def _touch(self, workflow_ids) -> None:
        Workflow.objects.filter(pk__in=set(workflow_ids)).update(updated_at=timezone.now())

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

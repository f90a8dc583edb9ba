from django.contrib import admin

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


@admin.register(WorkflowNode)
class WorkflowNodeAdmin(admin.ModelAdmin):
    list_display = ["name", "type", "workflow", "node_id"]
    list_filter = ["type"]
    search_fields = ["name", "workflow__name"]


@admin.register(WorkflowEdge)
class WorkflowEdgeAdmin(admin.ModelAdmin):
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

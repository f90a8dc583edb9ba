from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied

from agentsite.core.errors import AppError
from workflows.models import (
    Workflow,
    WorkflowApproval,
    WorkflowEdge,
    WorkflowNode,
    WorkflowRun,
    WorkflowTrigger,
    WorkflowVersion,
)
from workflows.services import version_record_live
from workflows.triggers import trigger_changes_check


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
    list_display = ["name", "owner", "visibility", "updated_at"]
    list_filter = ["owner", "visibility"]
    search_fields = ["name", "description", "owner__username"]
    # The access rule changes through PUT /api/workflows/:id/access, which audits it.
    readonly_fields = ["visibility"]
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


class RecordAdmin(admin.ModelAdmin):
    """A record other code keeps: read here, never added or edited, and deleted only with what owns it (a
    workflow, a run): Django's cascade asks this admin's delete permission for each row it takes along, so the
    permission stays, while the bulk action and the row's own delete page refuse (`deletable_alone`)."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    def deletable_alone(self, obj) -> bool:
        return False

    def delete_view(self, request, object_id, extra_context=None):
        obj = self.get_object(request, object_id)
        if obj is not None and not self.deletable_alone(obj):
            raise PermissionDenied(f"This {self.opts.verbose_name} is deleted with its owner only.")
        return super().delete_view(request, object_id, extra_context)


@admin.register(WorkflowVersion)
class WorkflowVersionAdmin(RecordAdmin):
    """Versions are immutable records: read only (a restore goes through the API: it makes a new version), and
    deleted with their workflow only (a run or a trigger may name any version)."""

    list_display = ["workflow", "number", "name", "note", "created_at"]
    list_filter = [("workflow", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["workflow__name", "note"]
    list_select_related = ["workflow"]
    readonly_fields = ["workflow", "number", "name", "description", "graph", "note", "created_at"]


@admin.register(WorkflowApproval)
class WorkflowApprovalAdmin(RecordAdmin):
    """Approvals are decided through the API (POST /api/approvals/:id), which resumes the run; here they are read
    only. A decided one may be deleted alone; a pending one only with its run (alone, its run would wait
    forever)."""

    list_display = ["node_name", "workflow", "run", "status", "approver_names", "on_timeout", "expires_at",
                    "decided_by", "decided_at", "created_at"]
    list_filter = ["status", "on_timeout", ("run__workflow", admin.RelatedOnlyFieldListFilter),
                   ("approvers", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["node_name", "run__workflow__name", "approvers__username"]
    list_select_related = ["run__workflow", "decided_by"]
    readonly_fields = ["run", "workflow", "node_id", "node_name", "prompt", "approver_names", "status", "on_timeout",
                       "expires_at", "comment", "data", "decided_by", "decided_at", "created_at"]
    fields = readonly_fields

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("approvers")

    def deletable_alone(self, obj: WorkflowApproval) -> bool:
        return obj.status != WorkflowApproval.PENDING

    @admin.display(description="Workflow", ordering="run__workflow__name")
    def workflow(self, obj: WorkflowApproval) -> Workflow:
        return obj.run.workflow

    @admin.display(description="Approvers")
    def approver_names(self, obj: WorkflowApproval) -> str:
        return ", ".join(sorted(user.get_username() for user in obj.approvers.all())) or "-"


class WorkflowTriggerForm(forms.ModelForm):
    """The trigger's settings, checked as the API checks them. The nonce (from which, with SECRET_KEY, the secret
    is derived) is not a field: it is never shown, and a new secret is made by the API's rotate, which shows it
    once."""

    class Meta:
        model = WorkflowTrigger
        fields = ["enabled", "mode", "version", "rate_per_minute"]

    def clean(self) -> dict:
        data = super().clean()
        try:
            trigger_changes_check(self.instance.workflow, {name: data.get(name) for name in ("mode", "version",
                                                                                             "rate_per_minute")})
        except AppError as exc:
            fields = [name for name in exc.details if name in self.fields]
            raise forms.ValidationError({fields[0]: exc.message} if fields else exc.message) from None
        return data


@admin.register(WorkflowTrigger)
class WorkflowTriggerAdmin(admin.ModelAdmin):
    """Operators see, disable, re-pin and delete webhook triggers here; a save or a deletion refuses or changes
    the next request in every process (nothing of a trigger is cached). Made through the API only, which shows
    the secret once; never the secret nor its nonce here (not listed, not a field, not searchable)."""

    form = WorkflowTriggerForm
    list_display = ["id", "workflow", "owner", "kind", "mode", "enabled", "version", "rate_per_minute",
                    "created_at", "rotated_at"]
    list_filter = ["enabled", "mode", "kind", ("workflow", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["workflow__name", "workflow__owner__username"]
    list_select_related = ["workflow__owner"]
    fields = ["hook_path", "workflow", "owner", "kind", "enabled", "mode", "version", "rate_per_minute",
              "created_at", "rotated_at"]
    readonly_fields = ["hook_path", "workflow", "owner", "kind", "created_at", "rotated_at"]

    def has_add_permission(self, request) -> bool:
        return False

    @admin.display(description="Owner", ordering="workflow__owner__username")
    def owner(self, obj: WorkflowTrigger) -> str:
        return obj.workflow.owner.get_username()

    @admin.display(description="URL path")
    def hook_path(self, obj: WorkflowTrigger) -> str:
        return f"/hooks/{obj.id}"


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

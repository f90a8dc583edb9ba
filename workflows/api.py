"""Serializers and thin views for /api/workflows/*. Runs are an async view: a client that hangs up cancels them."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from django.conf import settings as django_settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.authentication import async_post_view, revocable
from agentsite.agent.usage import Caller
from agentsite.core.dbcall import db
from agentsite.core.errors import AppError
from agentsite.core.sse import KEEPALIVE, sse_event, sse_response, with_keepalive
from agentsite.core.taskqueue import enqueue_with_commit
from agentsite.core.validation import json_object_body, validated
from organisation.policy import EDIT, MANAGE
from workflows import approvals, runs, selectors, services
from workflows.graph import holds_nul as graph_holds_nul
from workflows.models import WorkflowApproval, WorkflowRun

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

logger = logging.getLogger(__name__)


# --- serializers ------------------------------------------------------------------------------------

class PositionSerializer(serializers.Serializer):
    x = serializers.FloatField()
    y = serializers.FloatField()


class NodeSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="Unique within the workflow; edges and branches name it. Assigned when "
                                         "missing.")
    type = serializers.CharField(help_text="A node type: GET /api/meta lists them (`node_types`).")
    name = serializers.CharField(help_text="Unique within the workflow; `${name}` and context.outputs use it.")
    config = serializers.DictField(help_text="The type's keys (see the README), plus retry and onError.")
    position = PositionSerializer()


# `from` is a Python keyword, so the edge serializer is built with it as a plain key.
EdgeSerializer = type("EdgeSerializer", (serializers.Serializer,), {
    "from": serializers.CharField(help_text="A node id."), "to": serializers.CharField(help_text="A node id.")})


class OwnerSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()


class WorkflowSummarySerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    version = serializers.IntegerField(help_text="Its latest version's number (each save makes the next).")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    owner = OwnerSerializer(help_text="Whose it is: its name is unique among their workflows.")
    role = serializers.ChoiceField(choices=["owner", "editor", "viewer"], help_text=(
        "The caller's: a viewer runs it, an editor also saves versions, the owner (and admins) also delete, "
        "share and hand it over."))
    visibility = serializers.CharField(help_text="Its access rule's: private, everyone or shared.")


class VersionSummarySerializer(serializers.Serializer):
    number = serializers.IntegerField()
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    note = serializers.CharField(allow_blank=True, help_text="What made it: create, update, node added, import, "
                                 "restore of version n, admin edit.")
    created_at = serializers.DateTimeField()


class WorkflowSerializer(WorkflowSummarySerializer):
    nodes = NodeSerializer(many=True)
    edges = EdgeSerializer(many=True)


class VersionSerializer(VersionSummarySerializer):
    nodes = NodeSerializer(many=True)
    edges = EdgeSerializer(many=True)


def _version_data(version) -> dict[str, Any]:
    return VersionSerializer({**VersionSummarySerializer(version).data, "nodes": version.graph.get("nodes", []),
                              "edges": version.graph.get("edges", [])}).data


class WorkflowInputSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=64, help_text="1-64 letters, digits, '-', '_'; unique per owner.")
    description = serializers.CharField(max_length=services.MAX_DESCRIPTION, required=False, allow_blank=True,
                                        trim_whitespace=False)
    nodes = serializers.ListField(child=serializers.DictField(), required=False, max_length=500)
    edges = serializers.ListField(child=serializers.DictField(), required=False, max_length=5000)


class NodeInputSerializer(serializers.Serializer):
    id = serializers.CharField(max_length=64, required=False)
    type = serializers.CharField(max_length=20)
    name = serializers.CharField(max_length=64)
    config = serializers.DictField(required=False, allow_null=True, help_text="Absent or null: {}.")
    position = serializers.DictField(required=False, allow_null=True, help_text="Absent or null: {x: 0, y: 0}.")


# `async` is a Python keyword, so this serializer is built with it as a plain key (like EdgeSerializer).
RunInputSerializer = type("RunInputSerializer", (serializers.Serializer,), {
    "input": serializers.CharField(allow_blank=True, trim_whitespace=False, max_length=runs.MAX_INPUT_CHARS),
    "async": serializers.BooleanField(required=False, default=False, help_text="Queue the run (202)."),
    "stream": serializers.BooleanField(required=False, default=False, help_text="Answer an SSE stream."),
    "version": serializers.IntegerField(required=False, allow_null=True, default=None, min_value=1,
                                        help_text="Run this version (absent or null: the latest).")})


class TraceSerializer(serializers.Serializer):
    node = serializers.CharField()
    type = serializers.CharField()
    status = serializers.ChoiceField(choices=["running", "waiting", "success", "error", "cancelled"])
    attempts = serializers.IntegerField()
    started_at = serializers.CharField()
    duration_ms = serializers.FloatField()
    error = serializers.CharField(allow_null=True)


class RunErrorSerializer(serializers.Serializer):
    node = serializers.CharField(allow_null=True)
    message = serializers.CharField()


class RunSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    workflow_id = serializers.UUIDField()
    version = serializers.IntegerField(allow_null=True, help_text="The workflow version it ran (null: before "
                                       "versions).")
    status = serializers.ChoiceField(choices=[choice for choice, _ in WorkflowRun.STATUSES])
    input = serializers.CharField(allow_blank=True)
    outputs = serializers.DictField()
    output = serializers.JSONField(allow_null=True)
    error = RunErrorSerializer(allow_null=True)
    trace = TraceSerializer(many=True)
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)


class ExportSerializer(serializers.Serializer):
    format = serializers.CharField(default=selectors.EXPORT_FORMAT)
    version = serializers.IntegerField(default=selectors.EXPORT_VERSION, help_text="The document format's.")
    workflow_version = serializers.IntegerField(help_text="The workflow's version exported (its latest).")
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    # The limits of a saved workflow (WorkflowInputSerializer), so an import is refused on its length first.
    nodes = NodeSerializer(many=True, max_length=500)
    edges = EdgeSerializer(many=True, max_length=5000)


class ImportSerializer(serializers.Serializer):
    """What an import accepts: an export document, whose nodes may leave out what a created workflow's may
    (id, config, position), as an older or hand-written export does."""
    format = serializers.CharField(help_text=f"{selectors.EXPORT_FORMAT!r}.")
    version = serializers.IntegerField(help_text=f"At most {selectors.EXPORT_VERSION}.")
    workflow_version = serializers.IntegerField(required=False, allow_null=True, help_text=(
        "The version it was exported at; noted in the imported workflow's version 1."))
    name = serializers.CharField(max_length=64)
    description = serializers.CharField(max_length=services.MAX_DESCRIPTION, required=False, allow_blank=True)
    nodes = NodeInputSerializer(many=True, required=False, max_length=500)
    edges = EdgeSerializer(many=True, required=False, max_length=5000)


def _summary(workflow, role: str) -> dict[str, Any]:
    return {"id": workflow.pk, "name": workflow.name, "description": workflow.description,
            "version": workflow.version, "created_at": workflow.created_at, "updated_at": workflow.updated_at,
            "owner": {"id": workflow.owner_id, "username": workflow.owner.get_username()}, "role": role,
            "visibility": workflow.visibility}


def _workflow_data(workflow, role: str | None = None) -> dict[str, Any]:
    """The workflow as the API shows it to a caller whose role is `role` (default: the one workflow_for found)."""
    summary = _summary(workflow, role or getattr(workflow, "role", "owner"))
    return WorkflowSerializer({**summary, **selectors.workflow_graph(workflow).as_dict()}).data


_TRACE_KEYS = tuple(TraceSerializer().fields)


def run_data(run: WorkflowRun) -> dict[str, Any]:
    """RunSerializer's output, built directly: a serializer deep-copies its fields for every instance, which
    cost a synchronous run a twentieth of its server time (equality: tests/workflows/test_api.py)."""
    error = run.error
    return {
        "id": str(run.pk), "workflow_id": str(run.workflow_id), "version": run.version, "status": run.status,
        "input": run.input,
        "outputs": dict(run.outputs), "output": run.output,
        "error": None if error is None else {"node": error.get("node"), "message": str(error.get("message"))},
        "trace": [{key: _trace_value(key, entry.get(key)) for key in _TRACE_KEYS} for entry in run.trace],
        "started_at": _instant(run.started_at), "finished_at": _instant(run.finished_at),
    }


def _trace_value(key: str, value: Any) -> Any:
    if value is None:
        return None
    if key == "attempts":
        return int(value)
    if key == "duration_ms":
        return float(value)
    return str(value)


def _instant(value: Any) -> str | None:
    return None if value is None else serializers.DateTimeField().to_representation(value)


# --- views ------------------------------------------------------------------------------------------

NAME_TAKEN = OpenApiResponse(description="`conflict`: you already have a workflow of that name.")

class WorkflowListView(GenericAPIView):
    serializer_class = WorkflowSummarySerializer

    @extend_schema(responses={200: WorkflowSummarySerializer(many=True)})
    def get(self, request: Request) -> Response:
        page = self.paginate_queryset(selectors.workflow_visible_list(user=request.user))
        roles = selectors.workflow_roles(user=request.user, workflows=page)
        return self.get_paginated_response(WorkflowSummarySerializer(
            [_summary(workflow, roles[workflow.pk]) for workflow in page], many=True).data)

    @extend_schema(request=WorkflowInputSerializer, responses={201: WorkflowSerializer, 409: NAME_TAKEN})
    def post(self, request: Request) -> Response:
        data = validated(WorkflowInputSerializer, request.data)
        workflow = services.workflow_create(owner=request.user, name=data["name"],
                                            description=data.get("description", ""), nodes=data.get("nodes"),
                                            edges=data.get("edges"))
        return Response(_workflow_data(workflow), status=status.HTTP_201_CREATED)


class WorkflowDetailView(APIView):
    @extend_schema(responses={200: WorkflowSerializer})
    def get(self, request: Request, pk) -> Response:
        return Response(_workflow_data(selectors.workflow_for(user=request.user, workflow_id=pk)))

    # PUT takes any subset of the fields, like PATCH (docs/api.md): documented as the partial body it is.
    @extend_schema(request=WorkflowInputSerializer(partial=True), responses={200: WorkflowSerializer, 409: NAME_TAKEN})
    def put(self, request: Request, pk) -> Response:
        return self._update(request, pk)

    @extend_schema(request=WorkflowInputSerializer, responses={200: WorkflowSerializer, 409: NAME_TAKEN})
    def patch(self, request: Request, pk) -> Response:
        return self._update(request, pk)

    def _update(self, request: Request, pk) -> Response:
        workflow = selectors.workflow_for(user=request.user, workflow_id=pk, action=EDIT)
        changes = validated(WorkflowInputSerializer, request.data, partial=True)
        return Response(_workflow_data(services.workflow_update(workflow=workflow, changes=dict(changes)),
                                       workflow.role))

    @extend_schema(responses={204: None})
    def delete(self, request: Request, pk) -> Response:
        services.workflow_delete(workflow=selectors.workflow_for(user=request.user, workflow_id=pk, action=MANAGE))
        return Response(status=status.HTTP_204_NO_CONTENT)


class NodeCreateView(APIView):
    @extend_schema(request=NodeInputSerializer, responses={201: NodeSerializer})
    def post(self, request: Request, pk) -> Response:
        workflow = selectors.workflow_for(user=request.user, workflow_id=pk, action=EDIT)
        data = validated(NodeInputSerializer, request.data)
        node = services.workflow_node_add(workflow=workflow, node=dict(data))
        return Response(NodeSerializer(node.as_dict()).data, status=status.HTTP_201_CREATED)


class RunListView(GenericAPIView):
    serializer_class = RunSerializer

    @extend_schema(responses={200: RunSerializer(many=True)})
    def get(self, request: Request, pk) -> Response:
        workflow = selectors.workflow_for(user=request.user, workflow_id=pk)
        page = self.paginate_queryset(selectors.run_list_for(workflow=workflow, user=request.user))
        return self.get_paginated_response(RunSerializer(page, many=True).data)


class RunDetailView(APIView):
    @extend_schema(responses={200: RunSerializer})
    def get(self, request: Request, run_id) -> Response:
        return Response(run_data(selectors.run_get_for(owner=request.user, run_id=run_id)))


class VersionListView(GenericAPIView):
    serializer_class = VersionSummarySerializer

    @extend_schema(responses={200: VersionSummarySerializer(many=True)})
    def get(self, request: Request, pk) -> Response:
        workflow = selectors.workflow_for(user=request.user, workflow_id=pk)
        page = self.paginate_queryset(selectors.version_list_for(workflow=workflow))
        return self.get_paginated_response(VersionSummarySerializer(page, many=True).data)


class VersionDetailView(APIView):
    @extend_schema(responses={200: VersionSerializer})
    def get(self, request: Request, pk, number: str) -> Response:
        workflow = selectors.workflow_for(user=request.user, workflow_id=pk)
        return Response(_version_data(selectors.workflow_version_get(workflow=workflow,
                                                                     number=_version_number(number))))


class VersionRestoreView(APIView):
    @extend_schema(request=None, responses={200: WorkflowSerializer})
    def post(self, request: Request, pk, number: str) -> Response:
        workflow = selectors.workflow_for(user=request.user, workflow_id=pk, action=EDIT)
        restored = services.workflow_version_restore(workflow=workflow, number=_version_number(number))
        return Response(_workflow_data(restored, workflow.role))


def _version_number(number: str) -> int:
    """A version number from the path (any segment routes here, so another user's workflow and a missing one
    answer the same 404 before the number is read)."""
    if not number.isascii() or not number.isdigit() or len(number) > 9:
        raise AppError("not_found", "No such version.", 404)
    return int(number)


class ExportView(APIView):
    @extend_schema(responses={200: ExportSerializer})
    def get(self, request: Request, pk) -> Response:
        return Response(selectors.workflow_export(selectors.workflow_for(user=request.user, workflow_id=pk)))


class ImportView(APIView):
    @extend_schema(request=ImportSerializer, responses={201: WorkflowSerializer, 409: NAME_TAKEN})
    def post(self, request: Request) -> Response:
        services.check_export_header(request.data)  # "not an export" before any field's type
        validated(ImportSerializer, request.data)  # the fields' types, lengths and text, as the schema says
        workflow = services.workflow_import(owner=request.user, document=request.data)
        return Response(_workflow_data(workflow), status=status.HTTP_201_CREATED)


class RunSchemaView(APIView):
    """Documents POST /api/workflows/:id/run in the schema; the real handler is the async `run` view."""

    @extend_schema(request=RunInputSerializer, responses={
        (200, "application/json"): RunSerializer, 202: RunSerializer,
        (200, "text/event-stream"): OpenApiResponse(OpenApiTypes.STR, description=(
            "With stream: run_started, node_started, delta, node_finished, then done {run} or error {code, "
            "message}."))})
    def post(self, request: Request, pk) -> Response:  # pragma: no cover - never routed
        raise AppError("not_found", "Not found.", 404)


async def _run(request: HttpRequest, user, pk) -> HttpResponse:
    """POST /api/workflows/:id/run: 200 with the finished run, 202 queued (`async`), or an SSE stream."""
    data = validated(RunInputSerializer, json_object_body(request))
    queued = bool(data.get("async"))
    # Its key (usage, the key's budget) and its rights (a key without the admin scope: none) go with the run.
    caller = Caller.with_key(user.pk, getattr(request, "api_key", None), "workflow")
    record = await db(_run_start, owner=user, workflow_id=pk, input_text=data["input"], queued=queued,
                      version=data.get("version"), caller=caller)
    if queued:
        return JsonResponse(run_data(record), status=202)
    if data.get("stream"):
        # Ends at its next event once the token is revoked or the user deactivated (accounts.authentication).
        return sse_response(revocable(_run_stream(record), request.headers.get("Authorization")))
    # A client that hangs up cancels this view (Django 5), and with it the run: it is stored `cancelled`.
    return JsonResponse(run_data(await runs.workflow_execute(run=record)))


run = async_post_view(_run, schema_view=RunSchemaView)


def _run_start(*, owner: AbstractBaseUser, workflow_id: uuid.UUID, input_text: str, queued: bool,
               version: int | None = None, caller: Caller | None = None) -> WorkflowRun:
    # A user it is shared with runs it as themselves (services.run_create: the run is theirs).
    workflow = selectors.workflow_runnable_for(user=owner, workflow_id=workflow_id, version=version)
    if not queued:  # one insert: no transaction of its own to open
        return services.run_create(workflow=workflow, input_text=input_text, caller=caller)
    with transaction.atomic():  # the run with its task: a worker always finds the run it is handed
        record = services.run_create(workflow=workflow, input_text=input_text, queued=True, caller=caller)
        enqueue_with_commit("workflows.tasks.workflow_run_task", [(str(record.pk),)])
    return record


async def _run_stream(record: WorkflowRun) -> AsyncIterator[bytes]:
    interval = float(getattr(django_settings, "AGENTSITE_SSE_KEEPALIVE_S", 10.0))
    interruption = runs.Interruption()
    events = with_keepalive(runs.workflow_run_events(run=record, interruption=interruption), interval)
    try:
        async for item in events:
            if item is None:
                yield KEEPALIVE
                continue
            kind, data = item
            if kind == "done":
                data = {"run": run_data(data)}
            elif kind == "approval_requested":
                data = {"run": run_data(data[0]), "approvals": [approval_data(item) for item in data[1]]}
            yield sse_event(data, kind)
    except Exception as exc:  # a boundary: a started stream ends with one error event
        logger.exception("The workflow stream failed")
        interruption.failed(exc)
        # The run stops now and is stored `error` with this cause (not `cancelled`: the client is still
        # here), so a client that reads the run after the error event finds it finished.
        await events.aclose()
        # The server's own wording for a failure (as in every /api 500): the dashboard prefixes "The run
        # failed: ", which a message saying the same again doubled.
        yield sse_event({"code": "internal_error", "message": "The server failed; the error was logged."}, "error")


# --- approvals ----------------------------------------------------------------------------------------

class ApprovalSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    run_id = serializers.UUIDField()
    workflow_id = serializers.UUIDField()
    workflow_name = serializers.CharField()
    node = serializers.CharField(help_text="The approval node's name.")
    prompt = serializers.CharField(allow_blank=True)
    approvers = serializers.ListField(child=serializers.CharField(), help_text="User names.")
    status = serializers.ChoiceField(choices=[choice for choice, _ in WorkflowApproval.STATUSES])
    decision = serializers.ChoiceField(choices=["approve", "reject"], allow_null=True)
    comment = serializers.CharField(allow_blank=True)
    data = serializers.JSONField(allow_null=True)
    by = serializers.CharField(allow_null=True, help_text="Who decided; null for a timeout or undecided.")
    on_timeout = serializers.CharField(help_text='"reject" or "approve": what its timeout decides.')
    expires_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    decided_at = serializers.DateTimeField(allow_null=True)


class DecisionSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(choices=["approve", "reject"])
    comment = serializers.CharField(required=False, allow_blank=True, max_length=approvals.MAX_COMMENT,
                                    trim_whitespace=False)
    data = serializers.JSONField(required=False, allow_null=True, help_text="Any JSON, handed on in the output.")


def approval_data(approval: WorkflowApproval) -> dict[str, Any]:
    return ApprovalSerializer({
        "id": approval.pk, "run_id": approval.run_id, "workflow_id": approval.run.workflow_id,
        "workflow_name": approval.run.workflow.name, "node": approval.node_name, "prompt": approval.prompt,
        "approvers": sorted(user.get_username() for user in approval.approvers.all()), "status": approval.status,
        "decision": approval.decision, "comment": approval.comment, "data": approval.data,
        "by": approval.decided_by.get_username() if approval.decided_by else None,
        "on_timeout": approval.on_timeout, "expires_at": approval.expires_at, "created_at": approval.created_at,
        "decided_at": approval.decided_at}).data


class ApprovalListView(GenericAPIView):
    serializer_class = ApprovalSerializer

    @extend_schema(responses={200: ApprovalSerializer(many=True)})
    def get(self, request: Request) -> Response:
        page = self.paginate_queryset(approvals.approvals_for(user=request.user))
        return self.get_paginated_response([approval_data(item) for item in page])


class ApprovalDecideView(APIView):
    @extend_schema(request=DecisionSerializer, responses={
        200: ApprovalSerializer, 404: OpenApiResponse(description="No such approval, or you are not an approver."),
        409: OpenApiResponse(description="`conflict`: already decided.")})
    def post(self, request: Request, approval_id) -> Response:
        # Someone not named gets the 404 whatever they send: the body is read only for an approval they may decide.
        if not WorkflowApproval.objects.filter(pk=approval_id, approvers=request.user).exists():
            raise AppError("not_found", "No such approval (or you are not one of its approvers).", 404)
        data = validated(DecisionSerializer, request.data)
        if "data" in data and graph_holds_nul(data["data"]):
            raise AppError("invalid", "data cannot hold NUL characters.", 400, {"data": ["NUL characters."]})
        approval = approvals.approval_decide(approval_id=approval_id, user=request.user, decision=data["decision"],
                                             comment=data.get("comment", ""), data=data.get("data"))
        return Response(approval_data(approval))

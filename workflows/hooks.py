"""The webhook triggers' endpoints: managing them under /api/workflows/:id/triggers, and `POST /hooks/<id>`
(no JWT: the trigger's secret or a signature; the checks are workflows.triggers.admit's)."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.selectors import key_for_work
from agentsite.agent import usage
from agentsite.core.dbcall import db
from agentsite.core.errors import AppError, app_error_response
from agentsite.core.taskqueue import enqueue_with_commit
from agentsite.core.validation import validated
from workflows import runs, selectors, services, triggers
from workflows.api import run_data
from workflows.models import WorkflowRun, WorkflowTrigger

logger = logging.getLogger(__name__)


class TriggerSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    kind = serializers.CharField()
    url = serializers.CharField(help_text="Where the other system POSTs: <server>/hooks/<id>.")
    enabled = serializers.BooleanField()
    mode = serializers.ChoiceField(choices=WorkflowTrigger.MODES)
    version = serializers.IntegerField(allow_null=True, help_text="The version it runs (null: the latest).")
    rate_per_minute = serializers.IntegerField()
    secret_set = serializers.BooleanField()
    created_at = serializers.DateTimeField()
    rotated_at = serializers.DateTimeField(allow_null=True)


class TriggerWithSecretSerializer(TriggerSerializer):
    secret = serializers.CharField(help_text="Shown once, here (on create and rotate).")


class TriggerInputSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["webhook"], required=False, default="webhook")
    enabled = serializers.BooleanField(required=False, default=True)
    mode = serializers.ChoiceField(choices=WorkflowTrigger.MODES, required=False, default="sync")
    version = serializers.IntegerField(required=False, allow_null=True, default=None, min_value=1)
    rate_per_minute = serializers.IntegerField(required=False, allow_null=True, default=None, min_value=1,
                                               max_value=triggers.MAX_RATE)


def _data(request: Request, trigger: WorkflowTrigger, *, with_secret: bool = False) -> dict[str, Any]:
    data = {"id": str(trigger.id), "kind": trigger.kind, "url": request.build_absolute_uri(f"/hooks/{trigger.id}"),
            "enabled": trigger.enabled, "mode": trigger.mode, "version": trigger.version,
            "rate_per_minute": trigger.rate_per_minute, "secret_set": True,
            "created_at": serializers.DateTimeField().to_representation(trigger.created_at),
            "rotated_at": None if trigger.rotated_at is None
            else serializers.DateTimeField().to_representation(trigger.rotated_at)}
    if with_secret:
        data["secret"] = triggers.secret_of(trigger)
    return data


class TriggerListView(APIView):
    @extend_schema(responses={200: TriggerSerializer(many=True)})
    def get(self, request: Request, pk) -> Response:
        workflow = selectors.workflow_owned_for(user=request.user, workflow_id=pk)
        return Response([_data(request, item) for item in triggers.trigger_list_for(workflow=workflow)])

    @extend_schema(request=TriggerInputSerializer, responses={201: TriggerWithSecretSerializer})
    def post(self, request: Request, pk) -> Response:
        workflow = selectors.workflow_owned_for(user=request.user, workflow_id=pk)
        data = dict(validated(TriggerInputSerializer, request.data))
        data.pop("kind", None)
        trigger = triggers.trigger_create(workflow=workflow, changes=data, key=getattr(request, "api_key", None))
        return Response(_data(request, trigger, with_secret=True), status=status.HTTP_201_CREATED)


class TriggerDetailView(APIView):
    @extend_schema(request=TriggerInputSerializer(partial=True), responses={200: TriggerSerializer})
    def patch(self, request: Request, pk, trigger_id) -> Response:
        workflow = selectors.workflow_owned_for(user=request.user, workflow_id=pk)
        trigger = triggers.trigger_get_for(workflow=workflow, trigger_id=trigger_id)
        changes = dict(validated(TriggerInputSerializer, request.data, partial=True))
        changes.pop("kind", None)
        return Response(_data(request, triggers.trigger_update(trigger=trigger, changes=changes)))

    @extend_schema(responses={204: None})
    def delete(self, request: Request, pk, trigger_id) -> Response:
        workflow = selectors.workflow_owned_for(user=request.user, workflow_id=pk)
        triggers.trigger_get_for(workflow=workflow, trigger_id=trigger_id).delete()
        return Response(status=status.HTTP_204_NO_CONTENT)


class TriggerRotateView(APIView):
    @extend_schema(request=None, responses={200: TriggerWithSecretSerializer})
    def post(self, request: Request, pk, trigger_id) -> Response:
        workflow = selectors.workflow_owned_for(user=request.user, workflow_id=pk)
        trigger = triggers.trigger_rotate(trigger=triggers.trigger_get_for(workflow=workflow, trigger_id=trigger_id),
                                          key=getattr(request, "api_key", None))
        return Response(_data(request, trigger, with_secret=True))


# --- POST /hooks/<id> ----------------------------------------------------------------------------------

def sync_time_limit() -> float:
    return float(getattr(settings, "AGENTSITE_WEBHOOK_SYNC_TIMEOUT_S", 30.0))


@csrf_exempt
async def hook(request: HttpRequest, trigger_id: uuid.UUID) -> HttpResponse:
    """Start the trigger's workflow: 200 with the finished run (sync), 202 with the queued run (async), each as
    hook_run_data shows it, or a refusal in the envelope, recorded in the audit log
    (workflows.triggers.refusal_record: its flood rule)."""
    if request.method != "POST":
        response = app_error_response(await _refused(request, trigger_id, AppError(
            "method_not_allowed", "Use POST.", 405)))
        response["Allow"] = "POST"
        return response
    if int(request.META.get("CONTENT_LENGTH") or 0) > triggers.MAX_BODY_BYTES:  # refused before the body is read
        return app_error_response(await _refused(request, trigger_id, AppError(
            "payload_too_large", triggers.body_too_large(), 413, {"limit_chars": runs.MAX_INPUT_CHARS})))
    try:
        admitted = await db(triggers.admit, trigger_id=trigger_id, headers=request.headers, body=request.body,
                            content_type=request.content_type or "", charset=request.content_params.get("charset"))
    except AppError as exc:  # admit found the trigger before any other refusal
        return app_error_response(await _refused(request, trigger_id, exc, known=exc.code != "not_found"))
    try:
        caller = await _caller(admitted)
        await usage.check(caller)
        record = await db(_start, admitted, caller)
    except AppError as exc:
        return app_error_response(await _refused(request, trigger_id, exc, known=True))
    if admitted.mode == WorkflowTrigger.ASYNC:
        return JsonResponse(hook_run_data(record), status=202)
    with usage.calling(caller):
        finished = await runs.workflow_execute(run=record, time_limit=sync_time_limit())
    return JsonResponse(hook_run_data(finished))


def hook_run_data(run: WorkflowRun) -> dict[str, Any]:
    """The run as a webhook answers it: a `workflow_run` without the input the caller sent, nor each node's
    `outputs` (the input node's is that input again), but with `input_chars`; the owner reads both at
    /api/workflows/runs/<id>."""
    data = run_data(run)
    del data["input"], data["outputs"]
    data["input_chars"] = len(run.input)
    return data


async def _refused(request: HttpRequest, trigger_id: uuid.UUID, error: AppError, *,
                   known: bool | None = None) -> AppError:
    """`error`, after recording it in the audit log (which never fails the refusal)."""
    try:
        await db(triggers.refusal_record, trigger_id, error, request, known=known)
    except Exception:  # a boundary: the refusal is answered whatever the audit's store does
        logger.exception("A webhook refusal could not be recorded")
    return error


async def _caller(admitted: triggers.Admitted) -> usage.Caller:
    """Whom the run acts as: the key the trigger's secret was handed to (read now: 403 `trigger_disabled` when it
    no longer stands), else the owner."""
    if admitted.key_id is None:
        return usage.Caller(admitted.owner_id, facet="webhook")
    try:
        key = await db(key_for_work, key_id=admitted.key_id)
    except AppError as exc:
        raise AppError("trigger_disabled", f"This trigger is disabled: {exc.message}", 403) from None
    return usage.Caller.with_key(admitted.owner_id, key, "webhook")


def _start(admitted: triggers.Admitted, caller: usage.Caller) -> WorkflowRun:
    workflow = selectors.workflow_runnable(owner_id=admitted.owner_id, workflow_id=admitted.workflow_id,
                                           version=admitted.version)
    if workflow is None:  # deleted since the trigger was read
        raise AppError("not_found", "No such trigger.", 404)
    if admitted.mode != WorkflowTrigger.ASYNC:  # one insert: no transaction of its own to open
        return services.run_create(workflow=workflow, input_text=admitted.input_text, caller=caller)
    with transaction.atomic():  # the run with its task: a worker always finds the run it is handed
        record = services.run_create(workflow=workflow, input_text=admitted.input_text, queued=True, caller=caller)
        enqueue_with_commit("workflows.tasks.workflow_run_task", [(str(record.pk),)])
    return record

"""Serializers and thin views for /api/scheduler/*."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentsite.core.errors import AppError
from agentsite.core.validation import validated
from scheduler import selectors, services
from scheduler.cron import ScheduleError, cron_normalize, next_times, zone
from scheduler.models import ScheduledTask, TaskRun

# --- serializers ------------------------------------------------------------------------------------


NO_SUCH_AGENT = OpenApiResponse(description="`not_found` naming `agent`: no agent of that slug that the task's owner "
                                            "may use (GET /api/agents lists them).")

class TaskSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    cron = serializers.CharField()
    timezone = serializers.CharField()
    prompt = serializers.CharField(allow_blank=True)
    enabled = serializers.BooleanField()
    session_id = serializers.UUIDField(allow_null=True)
    workflow_id = serializers.UUIDField(allow_null=True)
    workflow_version = serializers.IntegerField(allow_null=True, help_text="The workflow version it runs (null: "
                                                "the latest).")
    missed = serializers.ChoiceField(choices=[choice for choice, _ in ScheduledTask.MISSED])
    model = serializers.CharField(allow_blank=True, help_text="The model the prompt goes to; empty: the session's, "
                                  "else the agent's default.")
    agent = serializers.CharField(source="agent_slug", help_text="The slug of the agent the prompt goes to; "
                                  "`default` when it names none.")
    next_run_at = serializers.DateTimeField(allow_null=True)
    last_run_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()


class TaskInputSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    cron = serializers.CharField(max_length=200, help_text="5 fields: minute hour day-of-month month day-of-week.")
    prompt = serializers.CharField(max_length=services.MAX_PROMPT_CHARS, trim_whitespace=False)
    enabled = serializers.BooleanField(required=False, default=True)
    timezone = serializers.CharField(max_length=64, required=False, default="UTC", help_text="An IANA zone.")
    session_id = serializers.UUIDField(required=False, allow_null=True, default=None)
    workflow_id = serializers.UUIDField(required=False, allow_null=True, default=None)
    workflow_version = serializers.IntegerField(required=False, allow_null=True, default=None, min_value=1,
                                                help_text="Pin the workflow's version n (null: the latest).")
    missed = serializers.ChoiceField(choices=[choice for choice, _ in ScheduledTask.MISSED], required=False,
                                     default=ScheduledTask.RUN_ONCE)
    model = serializers.CharField(max_length=300, required=False, allow_blank=True, default="",
                                  help_text="A catalogue entry or alias (GET /api/models); empty: the default.")
    agent = serializers.CharField(min_length=1, max_length=64, required=False, help_text=(
        "The slug of an agent the owner may use (GET /api/agents); not given: `default`. Another: 404 "
        "`not_found` naming agent."))


class TaskRunSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    task_id = serializers.UUIDField()
    task_name = serializers.CharField(source="task.name")
    trigger = serializers.ChoiceField(choices=[choice for choice, _ in TaskRun.TRIGGERS])
    scheduled_for = serializers.DateTimeField()
    status = serializers.ChoiceField(choices=[choice for choice, _ in TaskRun.STATUSES])
    output = serializers.CharField(allow_blank=True)
    error = serializers.CharField(allow_blank=True)
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)


class HistoryQuerySerializer(serializers.Serializer):
    task = serializers.UUIDField(required=False, help_text="Only this task's runs.")


class PreviewQuerySerializer(serializers.Serializer):
    cron = serializers.CharField(max_length=200)
    timezone = serializers.CharField(max_length=64, required=False, default="UTC")
    count = serializers.IntegerField(min_value=1, max_value=20, required=False, default=5)


class PreviewSerializer(serializers.Serializer):
    next = serializers.ListField(child=serializers.DateTimeField())


# --- views ------------------------------------------------------------------------------------------

BAD_QUERY = OpenApiResponse(description="`invalid`: a query parameter is missing or malformed (details name it).")

class TaskListView(GenericAPIView):
    serializer_class = TaskSerializer

    @extend_schema(responses={200: TaskSerializer(many=True)})
    def get(self, request: Request) -> Response:
        page = self.paginate_queryset(selectors.task_list_for(owner=request.user))
        return self.get_paginated_response(TaskSerializer(page, many=True).data)

    @extend_schema(request=TaskInputSerializer, responses={201: TaskSerializer, 404: NO_SUCH_AGENT})
    def post(self, request: Request) -> Response:
        data = dict(validated(TaskInputSerializer, request.data))
        task = services.task_create(owner=request.user, timezone_name=data.pop("timezone"),
                                    key=getattr(request, "api_key", None), **data)
        return Response(TaskSerializer(task).data, status=status.HTTP_201_CREATED)


class TaskDetailView(APIView):
    # PUT takes any subset of the fields, like PATCH (docs/api.md): documented as the partial body it is.
    @extend_schema(request=TaskInputSerializer(partial=True), responses={200: TaskSerializer})
    def put(self, request: Request, pk) -> Response:
        return self._update(request, pk)

    @extend_schema(request=TaskInputSerializer, responses={200: TaskSerializer})
    def patch(self, request: Request, pk) -> Response:
        return self._update(request, pk)

    def _update(self, request: Request, pk) -> Response:
        task = selectors.task_get_for(owner=request.user, task_id=pk)
        changes = validated(TaskInputSerializer, request.data, partial=True)
        task = services.task_update(task=task, changes=dict(changes), key=getattr(request, "api_key", None))
        return Response(TaskSerializer(task).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, pk) -> Response:
        services.task_delete(task=selectors.task_get_for(owner=request.user, task_id=pk))
        return Response(status=status.HTTP_204_NO_CONTENT)


class RunNowView(APIView):
    @extend_schema(request=None, responses={202: TaskRunSerializer})
    def post(self, request: Request, pk) -> Response:
        run = services.task_run_now(task=selectors.task_get_for(owner=request.user, task_id=pk))
        return Response(TaskRunSerializer(run).data, status=status.HTTP_202_ACCEPTED)


class HistoryView(GenericAPIView):
    serializer_class = TaskRunSerializer

    @extend_schema(parameters=[HistoryQuerySerializer], responses={200: TaskRunSerializer(many=True), 400: BAD_QUERY,
                                                                  404: OpenApiResponse(description="`task` names no "
                                                                                       "task of yours.")})
    def get(self, request: Request) -> Response:
        query = validated(HistoryQuerySerializer, request.query_params)
        task = selectors.task_get_for(owner=request.user, task_id=query["task"]) if query.get("task") else None
        page = self.paginate_queryset(selectors.run_list_for(owner=request.user, task=task))
        return self.get_paginated_response(TaskRunSerializer(page, many=True).data)


class PreviewView(APIView):
    @extend_schema(parameters=[PreviewQuerySerializer], responses={200: PreviewSerializer, 400: BAD_QUERY})
    def get(self, request: Request) -> Response:
        query = validated(PreviewQuerySerializer, request.query_params)
        try:
            expression = cron_normalize(query["cron"])
        except ScheduleError as exc:
            raise AppError("invalid", f"cron: {exc}", 400, {"cron": [str(exc)]}) from None
        try:
            tz = zone(query["timezone"])
        except ScheduleError as exc:
            raise AppError("invalid", f"timezone: {exc}", 400, {"timezone": [str(exc)]}) from None
        times = next_times(expression, tz, timezone.now(), query["count"])
        return Response(PreviewSerializer({"next": times}).data)

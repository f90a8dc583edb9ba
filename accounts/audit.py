"""The audit log's store, selector, retention and API; the front door is agentsite/core/audit.py."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django_q.models import Schedule
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request

from accounts.api import IsAdmin
from accounts.models import AuditEvent
from agentsite.core.errors import AppError
from agentsite.core.validation import query_text

TRIM_SCHEDULE_NAME = "agentsite audit retention"


_buckets_here: set[str] = set()  # coalesced buckets this process has seen a row for (a hint: an update first)


def audit_store(event: dict[str, Any]) -> None:
    """Insert the event's row; a coalesced event (`bucket`) whose minute has a row already adds to its count
    instead. The bucket is unique in the table, so processes racing for a bucket's first row insert one."""
    bucket = event.get("bucket", "")
    if bucket and bucket in _buckets_here and _counted(bucket):
        return
    try:
        with transaction.atomic():
            AuditEvent.objects.create(action=event["action"], outcome=event["outcome"], actor_id=event["actor_id"],
                                      actor_name=event["actor"], ip=event["ip"], user_agent=event["user_agent"],
                                      door=event["door"], target=event["target"], details=event["details"],
                                      bucket=bucket)
    except IntegrityError:
        if not bucket or not _counted(bucket):
            raise
    if bucket:
        if len(_buckets_here) > 10_000:
            _buckets_here.clear()
        _buckets_here.add(bucket)


def _counted(bucket: str) -> bool:
    return AuditEvent.objects.filter(bucket=bucket).update(count=F("count") + 1) > 0


def audit_trim() -> int:
    """Delete events older than AGENTSITE_AUDIT_RETENTION_DAYS (a task, daily)."""
    cutoff = timezone.now() - timedelta(days=settings.AGENTSITE_AUDIT_RETENTION_DAYS)
    deleted, _ = AuditEvent.objects.filter(time__lt=cutoff).delete()
    return deleted


def audit_trim_schedule_ensure() -> str:
    Schedule.objects.update_or_create(name=TRIM_SCHEDULE_NAME, defaults={
        "func": "accounts.audit.audit_trim", "repeats": -1, "schedule_type": Schedule.DAILY, "cron": None})
    return "daily"


def audit_events(*, actor: str = "", action: str = "", outcome: str = "", since: Any = None, until: Any = None):
    rows = AuditEvent.objects.all()
    if actor:
        rows = rows.filter(actor_id=int(actor)) if actor.isdigit() else rows.filter(actor_name=actor)
    if action:
        rows = rows.filter(action__startswith=action) if action.endswith(".") else rows.filter(action=action)
    if outcome:
        rows = rows.filter(outcome=outcome)
    if since is not None:
        rows = rows.filter(time__gte=since)
    if until is not None:
        rows = rows.filter(time__lt=until)
    return rows


class AuditEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_name")

    class Meta:
        model = AuditEvent
        fields = ["id", "time", "action", "outcome", "actor", "actor_id", "ip", "user_agent", "door", "target",
                  "details", "count"]


def _when(request: Request, name: str):
    raw = request.query_params.get(name, "")
    if not raw:
        return None
    value = parse_datetime(raw)
    if value is None:
        raise AppError("invalid", f"{name}: an ISO 8601 time, e.g. 2026-11-25T10:00:00Z.", 400,
                       {name: ["Not an ISO 8601 time."]})
    return value if value.tzinfo else timezone.make_aware(value, timezone.utc)


class AuditListView(GenericAPIView):
    """GET /api/audit: admins only; newest first; filters actor (username or id), action (exact, or a prefix
    ending in a dot: `auth.`), outcome, from, to (ISO 8601); paginated like every list."""

    permission_classes = [IsAdmin]
    serializer_class = AuditEventSerializer

    @extend_schema(parameters=[OpenApiParameter(name, str, required=False) for name in
                               ("actor", "action", "outcome", "from", "to")],
                   responses={200: AuditEventSerializer(many=True),
                              400: OpenApiResponse(description="`invalid`: a filter that is not valid")})
    def get(self, request: Request):
        outcome = request.query_params.get("outcome", "")
        if outcome and outcome not in ("success", "failure", "refused"):
            raise AppError("invalid", "outcome: one of success, failure, refused.", 400, {"outcome": ["Unknown."]})
        rows = audit_events(actor=query_text(request.query_params, "actor"),
                            action=query_text(request.query_params, "action"), outcome=outcome,
                            since=_when(request, "from"), until=_when(request, "to"))
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(AuditEventSerializer(page, many=True).data)

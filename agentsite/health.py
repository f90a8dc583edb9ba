"""GET /api/health: liveness plus a database round trip; GET /metrics, the Prometheus scrape; GET /api/metrics/summary,
the figures of the dashboard's health strip."""

from __future__ import annotations

import hmac
import ipaddress
import time

from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

import agentsite
from accounts.api import IsAdmin
from agentsite.core import metrics
from agentsite.core.errors import error_response

STARTED_AT = time.monotonic()


def database_ok() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        return True
    except DatabaseError:
        return False
    except Exception:  # a driver that cannot connect raises its own types before Django wraps them
        return False


HEALTH = inline_serializer("Health", {
    "status": serializers.ChoiceField(["ok", "degraded"]), "version": serializers.CharField(),
    "database": serializers.ChoiceField(["ok", "error"]), "uptime_s": serializers.FloatField()})


class HealthView(APIView):
    permission_classes = [AllowAny]
    authentication_classes: list = []

    @extend_schema(responses={(status, "application/json"): HEALTH for status in (200, 503)},
                   description="200 when the database answers; 503 with status `degraded` when it does not.")
    def get(self, request: Request) -> Response:
        db_ok = database_ok()
        body = {
            "status": "ok" if db_ok else "degraded",
            "version": agentsite.__version__,
            "database": "ok" if db_ok else "error",
            "uptime_s": round(time.monotonic() - STARTED_AT, 3),
        }
        return Response(body, status=200 if db_ok else 503)


SUMMARY_ROUTE = "/api/metrics/summary"
SUMMARY = inline_serializer("MetricsSummary", {
    "enabled": serializers.BooleanField(), "at": serializers.FloatField(required=False),
    "requests": serializers.IntegerField(required=False), "errors": serializers.IntegerField(required=False),
    "streams_open": serializers.IntegerField(required=False),
    "first_token": inline_serializer("FirstTokenLatency", {
        "count": serializers.IntegerField(), "sum": serializers.FloatField(), "buckets": inline_serializer(
            "FirstTokenBucket", {"le": serializers.CharField(), "count": serializers.IntegerField()}, many=True),
        "p50": serializers.FloatField(allow_null=True)}, required=False)})


class MetricsSummaryView(APIView):
    """GET /api/metrics/summary: admins only. The health strip's figures (agentsite.core.metrics.summary),
    cumulative, without this route's own requests; `{"enabled": false}` while AGENTSITE_METRICS is off."""

    permission_classes = [IsAdmin]

    @extend_schema(responses={200: SUMMARY},
                   description="Cumulative totals since the metrics started, summed over the host's processes: "
                               "a reader makes rates from two answers (`at`). `{\"enabled\": false}` while "
                               "AGENTSITE_METRICS is off.")
    def get(self, request: Request) -> Response:
        return Response(metrics.summary(leave_out_route=SUMMARY_ROUTE))


def metrics_view(request: HttpRequest) -> HttpResponse:
    """GET /metrics: the Prometheus text of every process of the host (agentsite/core/metrics.py). 404 while
    AGENTSITE_METRICS is off; with AGENTSITE_METRICS_TOKEN a scrape sends it as a bearer token (401 otherwise),
    without one only loopback clients are answered (403)."""
    if not metrics.ENABLED:
        return error_response("not_found", "Metrics are off (AGENTSITE_METRICS).", 404)
    if request.method not in ("GET", "HEAD"):
        return error_response("method_not_allowed", "This method is not allowed here.", 405, headers={"Allow": "GET"})
    token = settings.AGENTSITE_METRICS_TOKEN
    if token:
        offered = request.headers.get("Authorization", "")
        if not hmac.compare_digest(offered.encode(), f"Bearer {token}".encode()):
            return error_response("not_authenticated", "A scrape needs the metrics bearer token.", 401,
                                  headers={"WWW-Authenticate": 'Bearer realm="metrics"'})
    elif not _loopback(request.META.get("REMOTE_ADDR", "")):
        return error_response("forbidden", "Without AGENTSITE_METRICS_TOKEN metrics are answered on loopback only.",
                              403)
    body, content_type = metrics.render()
    return HttpResponse(body, content_type=content_type)


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False

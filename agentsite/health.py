"""GET /api/health: liveness plus a database round trip."""

from __future__ import annotations

import time

from django.db import DatabaseError, connection
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

import agentsite

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

"""The toy door's route in /api/schema: a schema-only view (compat/schema.py says how they are used)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers

from compat.schema import V1
from tests.compat.toydoor.wire import ToySayRequest


class ToySaySchema(V1):
    @extend_schema(tags=["v1"], summary="Say something (the toy dialect)", request=ToySayRequest,
                   responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description="{toy, model, text, finish}")})
    def post(self, request):  # pragma: no cover - never routed
        raise NotImplementedError


class ToyErrorBodySerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()


class ToyErrorSerializer(serializers.Serializer):
    """The toy's error shape."""

    toy_error = ToyErrorBodySerializer()

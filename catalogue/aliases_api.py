"""/api/aliases (names for ordered lists of catalogue entries, administrators only) and /api/models (the
catalogue for pickers, any user)."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentsite.agent import modelaccess, routing
from agentsite.agent.usage import Caller
from agentsite.core.audit import audit
from agentsite.core.permissions import IsAdmin
from agentsite.core.validation import validated
from catalogue import services
from catalogue.models import ModelAlias
from catalogue.selectors import alias_get, alias_list, settings_get


class AliasTargetSerializer(serializers.Serializer):
    model = serializers.CharField(max_length=300)
    weight = serializers.FloatField(min_value=0, max_value=1_000_000, required=False, default=1.0)


class AliasInputSerializer(serializers.Serializer):
    name = serializers.RegexField(r"^[a-z0-9][a-z0-9_.:-]*$", max_length=100,
                                  error_messages={"invalid": "Use lowercase letters, digits, _ . : and - (no /)."})
    strategy = serializers.ChoiceField(choices=list(routing.STRATEGIES), required=False)
    targets = AliasTargetSerializer(many=True, allow_empty=False, max_length=50)
    fallback_on = serializers.ListField(child=serializers.IntegerField(min_value=400, max_value=499), max_length=100,
                                        required=False)


class AliasOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = ModelAlias
        fields = ["id", "name", "strategy", "targets", "fallback_on", "created_at", "updated_at"]


def _targets(data: dict) -> dict:
    if "targets" in data:
        data["targets"] = [{"model": target["model"], "weight": target.get("weight", 1.0)}
                           for target in data["targets"]]
    return data


class AliasListView(APIView):
    def get_permissions(self):
        return [IsAuthenticated(), IsAdmin()]

    @extend_schema(responses={200: AliasOutputSerializer(many=True)})
    def get(self, request: Request) -> Response:
        return Response(AliasOutputSerializer(alias_list(), many=True).data)

    @extend_schema(request=AliasInputSerializer, responses={
        201: AliasOutputSerializer, 409: OpenApiResponse(description="`conflict`: the name is taken")})
    def post(self, request: Request) -> Response:
        data = _targets(dict(validated(AliasInputSerializer, request.data)))
        alias = services.alias_create(data=data)
        audit("alias.create", request=request, target=f"alias:{alias.name}", details={"fields": sorted(data)})
        return Response(AliasOutputSerializer(alias).data, status=status.HTTP_201_CREATED)


class AliasDetailView(APIView):
    permission_classes = [IsAuthenticated, IsAdmin]

    @extend_schema(responses={200: AliasOutputSerializer})
    def get(self, request: Request, alias_id: str) -> Response:
        return Response(AliasOutputSerializer(alias_get(alias_id=alias_id)).data)

    @extend_schema(request=AliasInputSerializer, responses={200: AliasOutputSerializer})
    def patch(self, request: Request, alias_id: str) -> Response:
        alias = alias_get(alias_id=alias_id)
        changes = _targets(dict(validated(AliasInputSerializer, request.data, partial=True)))
        alias = services.alias_update(alias=alias, changes=changes)
        audit("alias.update", request=request, target=f"alias:{alias.name}", details={"fields": sorted(changes)})
        return Response(AliasOutputSerializer(alias).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, alias_id: str) -> Response:
        alias = alias_get(alias_id=alias_id)
        services.alias_delete(alias=alias)
        audit("alias.delete", request=request, target=f"alias:{alias.name}")
        return Response(status=status.HTTP_204_NO_CONTENT)


class CatalogueEntrySerializer(serializers.Serializer):
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=["alias", "model"])
    state = serializers.CharField(help_text="ok | cooling | discovery_failed | no_target")
    connection = serializers.CharField(required=False)
    provider = serializers.CharField(required=False)
    model = serializers.CharField(required=False)
    strategy = serializers.CharField(required=False)
    targets = serializers.ListField(child=serializers.CharField(), required=False)


class CatalogueSerializer(serializers.Serializer):
    default = serializers.CharField(help_text="The agent's default model (config `model`, or the default "
                                              "connection's first model).")
    models = CatalogueEntrySerializer(many=True)


class ModelsView(APIView):
    """The model catalogue for pickers: aliases and `<connection>/<model>` entries with their state, those the
    caller's groups allow (model access: agentsite.agent.modelaccess), as /v1/models lists them."""

    @extend_schema(responses={200: CatalogueSerializer})
    def get(self, request: Request) -> Response:
        settings = settings_get()
        entries = [entry.as_dict() for entry in routing.catalogue_entries(settings)]
        caller = Caller.with_key(request.user.pk, getattr(request, "api_key", None), "api")
        allowed = set(async_to_sync(modelaccess.allowed_names)(caller, [entry["name"] for entry in entries]))
        return Response({"default": routing.default_model_name(settings),
                         "models": [entry for entry in entries if entry["name"] in allowed]})

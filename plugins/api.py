"""Serializers and thin views for /api/plugins (admins): this process's plugins, and reloading them."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.api import IsAdmin
from agentsite.core.audit import audit
from agentsite.core.validation import validated
from plugins import selectors, services
from plugins.loader import PluginState


class PluginSerializer(serializers.Serializer):
    name = serializers.CharField()
    path = serializers.CharField(help_text="The plugin's file or package directory on the server.")
    status = serializers.ChoiceField(choices=["loaded", "error"])
    tools = serializers.ListField(child=serializers.CharField(), help_text="The tools it offers (none on error).")
    error = serializers.CharField(allow_blank=True, help_text="Why it failed to load: file, line, message.")
    line = serializers.IntegerField(allow_null=True, help_text="The failing line, when one is known.")
    loaded_at = serializers.DateTimeField(allow_null=True, help_text="When this state was reached (a load, or "
                                                                     "a failed attempt).")


class PluginListSerializer(serializers.Serializer):
    plugins = PluginSerializer(many=True)


class ReloadInputSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=64, required=False, help_text="One plugin; absent: all of them.")


def _listing(states: list[PluginState]) -> dict:
    plugins = [{"name": state.name, "path": state.path, "status": state.status, "tools": state.tool_names,
                "error": state.error, "line": state.line, "loaded_at": state.loaded_at} for state in states]
    return PluginListSerializer({"plugins": plugins}).data


class PluginListView(APIView):
    permission_classes = [IsAuthenticated, IsAdmin]

    @extend_schema(responses={200: PluginListSerializer}, summary="The plugins this process has loaded or failed to")
    def get(self, request: Request) -> Response:
        return Response(_listing(selectors.plugins_list()))


class PluginReloadView(APIView):
    permission_classes = [IsAuthenticated, IsAdmin]

    @extend_schema(request=ReloadInputSerializer, responses={
        200: PluginListSerializer, 404: OpenApiResponse(description="No plugin of that name.")},
                   summary="Reload one plugin (or all) now, in the process that serves this request")
    def post(self, request: Request) -> Response:
        data = validated(ReloadInputSerializer, request.data)
        listing = _listing(services.plugins_reload(name=data.get("name")))
        audit("plugin.reload", request=request, target=f"plugin:{data.get('name') or '*'}")
        return Response(listing)

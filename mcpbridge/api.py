"""Serializers and thin views for /api/mcp/*: tools, servers, connect, disconnect, call."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from django.core.validators import URLValidator
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.api import IsAdmin
from agentsite.validation import validated
from mcpbridge import selectors, services
from mcpbridge.models import SERVER_NAME_PATTERN, McpServer

# --- serializers ------------------------------------------------------------------------------------

class ConnectInputSerializer(serializers.Serializer):
    name = serializers.RegexField(SERVER_NAME_PATTERN, max_length=32, error_messages={
        "invalid": "Use 1-32 letters, digits, '-' or '_' (starting with a letter or digit, no '__')."})
    command = serializers.CharField(max_length=1000, required=False)
    args = serializers.ListField(child=serializers.CharField(max_length=10_000, allow_blank=True,
                                                             trim_whitespace=False), max_length=200, required=False)
    env = serializers.DictField(child=serializers.CharField(max_length=10_000, allow_blank=True, trim_whitespace=False),
                                required=False, help_text="Extra environment variables for a stdio server (kept "
                                                          "secret: never returned).")
    url = serializers.URLField(max_length=2000, required=False, validators=[URLValidator(schemes=["http", "https"])])
    transport = serializers.ChoiceField(choices=[McpServer.SSE, McpServer.STREAMABLE_HTTP, McpServer.STDIO],
                                        required=False, help_text="For a URL; guessed from it when absent "
                                                                  "(a path ending in /sse is `sse`).")
    headers = serializers.DictField(child=serializers.CharField(max_length=10_000, trim_whitespace=False),
                                    required=False, help_text="HTTP headers for a URL server, e.g. Authorization "
                                                              "(kept secret: never returned).")

    def validate(self, data: dict) -> dict:
        if bool(data.get("command")) == bool(data.get("url")):
            raise serializers.ValidationError({"command": ["Give either a command (stdio) or a url."]})
        if data.get("command"):
            if data.get("transport", McpServer.STDIO) != McpServer.STDIO:
                raise serializers.ValidationError({"transport": ["A command speaks stdio."]})
            if data.get("headers"):
                raise serializers.ValidationError({"headers": ["Headers are for a URL server."]})
        else:
            if data.get("transport") == McpServer.STDIO:
                raise serializers.ValidationError({"transport": ["A URL speaks sse or streamable-http."]})
            if data.get("env") or data.get("args"):
                raise serializers.ValidationError({"env": ["env and args are for a stdio server."]})
        return data


class ServerSerializer(serializers.Serializer):
    name = serializers.CharField()
    transport = serializers.ChoiceField(choices=[choice for choice, _ in McpServer.TRANSPORTS])
    command = serializers.CharField(required=False, help_text="stdio servers only.")
    args = serializers.ListField(child=serializers.CharField(), required=False, help_text="stdio servers only.")
    url = serializers.CharField(required=False, help_text="URL servers only.")
    status = serializers.ChoiceField(choices=[McpServer.CONNECTED, McpServer.ERROR])
    error = serializers.CharField(allow_blank=True)
    tools = serializers.IntegerField(help_text="How many tools the server offers.")


class ServerListSerializer(serializers.Serializer):
    servers = ServerSerializer(many=True)


class NameSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=32)


class DisconnectedSerializer(serializers.Serializer):
    name = serializers.CharField()
    status = serializers.CharField(default="disconnected")


class ToolSchemaSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    inputSchema = serializers.DictField()  # noqa: N815 - MCP's own key


class ListedToolSerializer(serializers.Serializer):
    server = serializers.CharField(help_text='"builtin", a plugin, or the name of a connected MCP server.')
    tool = ToolSchemaSerializer()


class ToolListSerializer(serializers.Serializer):
    tools = ListedToolSerializer(many=True)


class CallInputSerializer(serializers.Serializer):
    server = serializers.CharField(max_length=200)
    tool = serializers.CharField(max_length=200)
    arguments = serializers.DictField(required=False, default=dict)


class CallOutputSerializer(serializers.Serializer):
    content = serializers.ListField(child=serializers.DictField(), help_text="MCP content blocks.")
    is_error = serializers.BooleanField()


def _server_data(overview: selectors.ServerOverview) -> dict:
    server = overview.server
    data: dict = {"name": server.name, "transport": server.transport}
    if server.transport == McpServer.STDIO:
        data.update(command=server.command, args=list(server.args or []))
    else:
        data["url"] = server.url
    return {**data, "status": overview.status, "error": overview.error, "tools": overview.tool_count}


# --- views ------------------------------------------------------------------------------------------

class ToolListView(APIView):
    @extend_schema(responses={200: ToolListSerializer}, summary="Every tool: built-in, plugins, MCP servers")
    def get(self, request: Request) -> Response:
        tools = async_to_sync(selectors.tools_available)(user_id=request.user.pk)
        listed = [{"server": selectors.tool_server(tool), "tool": {
            "name": selectors.tool_listed_name(tool), "description": tool.description,
            "inputSchema": tool.input_schema}} for tool in tools]
        return Response(ToolListSerializer({"tools": listed}).data)


class ServerListView(APIView):
    @extend_schema(responses={200: ServerListSerializer}, summary="Connected MCP servers and their status")
    def get(self, request: Request) -> Response:
        overview = async_to_sync(selectors.mcp_server_overview)()
        return Response(ServerListSerializer({"servers": [_server_data(item) for item in overview]}).data)


class ConnectView(APIView):
    permission_classes = [IsAuthenticated, IsAdmin]

    @extend_schema(request=ConnectInputSerializer, responses={
        201: ServerSerializer, 502: OpenApiResponse(description="`mcp_connect_failed`: nothing stored")},
                   summary="Connect an MCP server (stdio command or URL) and store it")
    def post(self, request: Request) -> Response:
        data = validated(ConnectInputSerializer, request.data)
        server = services.mcp_server_connect(**data)
        overview = selectors.ServerOverview(server, server.status, server.error, len(server.tools))
        return Response(ServerSerializer(_server_data(overview)).data, status=status.HTTP_201_CREATED)


class DisconnectView(APIView):
    permission_classes = [IsAuthenticated, IsAdmin]

    @extend_schema(request=NameSerializer, responses={
        200: DisconnectedSerializer, 404: OpenApiResponse(description="No MCP server of that name.")},
                   summary="Disconnect an MCP server (its process is stopped) and forget it")
    def post(self, request: Request) -> Response:
        data = validated(NameSerializer, request.data)
        name = data["name"]
        services.mcp_server_disconnect(name=name)
        return Response(DisconnectedSerializer({"name": name, "status": "disconnected"}).data)


class CallView(APIView):
    @extend_schema(request=CallInputSerializer, responses={
        200: CallOutputSerializer, 404: OpenApiResponse(description="No such server or tool."),
        502: OpenApiResponse(description="`upstream_error`: the MCP server failed")},
                   summary="Call any listed tool directly")
    def post(self, request: Request) -> Response:
        data = validated(CallInputSerializer, request.data)
        result = async_to_sync(services.mcp_tool_call)(user_id=request.user.pk, server=data["server"],
                                                       tool=data["tool"], arguments=data["arguments"])
        return Response(CallOutputSerializer({"content": result.content, "is_error": result.is_error}).data)

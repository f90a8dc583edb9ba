"""Serializers and thin views for /api/mcp/*: tools, servers, connect (an OAuth server through its callback and
reconnect), disconnect, call."""

from __future__ import annotations

import re
from urllib.parse import urlencode

from asgiref.sync import async_to_sync
from django.core.validators import URLValidator
from django.http import HttpResponseRedirect
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.api import IsAdmin
from agentsite.agent.tools import ToolContext
from agentsite.core.audit import audit
from agentsite.core.errors import AppError
from agentsite.core.validation import validated
from mcpbridge import selectors, services
from mcpbridge.models import SERVER_NAME_PATTERN, McpServer, McpServerOAuth, masked_url
from organisation.access import MAX_GRANTS, GrantOutSerializer, rule_of
from organisation.models import EVERYONE, PRIVATE, SHARED, VISIBILITIES

# --- serializers ------------------------------------------------------------------------------------

AUTH_CHOICES = [McpServer.NO_AUTH, McpServer.OAUTH]
DASHBOARD_MCP = "/#/mcp"
CALLBACK_PATH = "/api/mcp/oauth/callback"

# The rule's own values, and the older ones still accepted on connect and PATCH (mapped by `access_of`).
LEGACY_ADMINS, LEGACY_USERS = "admins", "users"
VISIBILITY_CHOICES = [PRIVATE, EVERYONE, SHARED, LEGACY_ADMINS, LEGACY_USERS]
VISIBILITY_HELP = ("Who may see the server and use its tools: private (the default: admins only), everyone (every "
                   "signed-in user), or shared (admins and the usernames in `users`; groups through PUT "
                   ".../access). The older admins (= private) and users (= shared) are accepted too.")


def access_of(data: dict) -> dict:
    """The request's `visibility`/`users` as the access rule stores them: admins is private, users is shared,
    and `users` goes with shared (users needs at least one name). Raises ValidationError."""
    given = data.get("visibility", PRIVATE)
    if given not in VISIBILITY_CHOICES:
        raise serializers.ValidationError({"visibility": [f"Use one of {', '.join(VISIBILITY_CHOICES)}."]})
    visibility = {LEGACY_ADMINS: PRIVATE, LEGACY_USERS: SHARED}.get(given, given)
    if data.get("visibility") == LEGACY_USERS and not data.get("users"):
        raise serializers.ValidationError({"users": ["Name at least one user for visibility users."]})
    if visibility != SHARED and data.get("users"):
        raise serializers.ValidationError({"users": ["users goes with visibility shared (or users)."]})
    return {**data, "visibility": visibility}


def visibility_field(**kwargs) -> serializers.CharField:
    """Checked by `access_of`: a choice field here would name a second enum `visibility` beside the rule's own
    (organisation.access), which the schema cannot tell apart."""
    return serializers.CharField(max_length=10, help_text=VISIBILITY_HELP, **kwargs)


class AccessInputSerializer(serializers.Serializer):
    visibility = visibility_field()
    users = serializers.ListField(child=serializers.CharField(max_length=150), max_length=MAX_GRANTS,
                                  required=False, help_text="Usernames granted `viewer` (visibility shared).")

    def validate(self, data: dict) -> dict:
        return access_of(data)


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
    auth = serializers.ChoiceField(choices=AUTH_CHOICES, default=McpServer.NO_AUTH, help_text=(
        "oauth: the server requires OAuth; the answer is 202 with the authorization_url where an admin consents."))
    scopes = serializers.ListField(child=serializers.RegexField(r"^[\x21\x23-\x5b\x5d-\x7e]+$", max_length=200),
                                   max_length=50, required=False,
                                   help_text="OAuth: the scopes to ask for (default: what the server names).")
    client_id = serializers.CharField(max_length=1000, required=False,
                                      help_text="OAuth: a client registered beforehand (else dynamic registration).")
    client_secret = serializers.CharField(max_length=2000, required=False, trim_whitespace=False,
                                          help_text="OAuth: the client_id's secret (kept secret: never returned).")
    authorization_server = serializers.URLField(
        max_length=2000, required=False, validators=[URLValidator(schemes=["http", "https"])],
        help_text="OAuth: the authorization server's issuer URL, used when the server publishes none.")

    visibility = visibility_field(default=PRIVATE)
    users = serializers.ListField(child=serializers.CharField(max_length=150), max_length=MAX_GRANTS, required=False,
                                  help_text="Usernames granted `viewer` (visibility shared).")

    def validate(self, data: dict) -> dict:
        data = access_of(data)
        if bool(data.get("command")) == bool(data.get("url")):
            raise serializers.ValidationError({"command": ["Give either a command (stdio) or a url."]})
        oauth_fields = [key for key in ("scopes", "client_id", "client_secret", "authorization_server") if key in data]
        if data["auth"] == McpServer.OAUTH:
            if data.get("command"):
                raise serializers.ValidationError({"auth": ["OAuth is for a URL server."]})
            if data.get("headers"):
                raise serializers.ValidationError({"headers": ["With auth oauth, the server's token is the grant's."]})
            if data.get("client_secret") and not data.get("client_id"):
                raise serializers.ValidationError({"client_secret": ["client_secret goes with client_id."]})
        elif oauth_fields:
            raise serializers.ValidationError({oauth_fields[0]: [f"{oauth_fields[0]} goes with auth oauth."]})
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


class OAuthStateSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=[McpServerOAuth.AUTHORIZED, McpServerOAuth.NEEDS_AUTHORIZATION])
    expires_at = serializers.DateTimeField(allow_null=True, help_text="When the access token ends (it is refreshed "
                                                                      "before); null when not authorized or unsaid.")
    scopes = serializers.ListField(child=serializers.CharField(), help_text="The scopes granted (else asked).")


class ServerSerializer(serializers.Serializer):
    """A server as listed. `args`, `env` and `headers` are write-only: only how many arguments and which
    variable and header names are set is shown (the names to admins only), never a value.
    """

    name = serializers.CharField()
    transport = serializers.ChoiceField(choices=[choice for choice, _ in McpServer.TRANSPORTS])
    command = serializers.CharField(required=False, help_text="stdio servers only.")
    args_count = serializers.IntegerField(required=False, help_text="stdio servers only: how many arguments are set "
                                                                    "(their values are never returned).")
    env_keys = serializers.ListField(child=serializers.CharField(), required=False,
                                     help_text="Admins, stdio servers: the names of the variables set in env.")
    url = serializers.CharField(required=False, help_text="URL servers only; a query string's values and any "
                                                          "user:password are masked.")
    header_names = serializers.ListField(child=serializers.CharField(), required=False,
                                         help_text="Admins, URL servers: the names of the headers set.")
    visibility = serializers.ChoiceField(choices=VISIBILITIES, required=False,
                                         help_text="Admins only: private, everyone or shared (the access rule).")
    grants = GrantOutSerializer(many=True, required=False,
                                help_text="Admins only: the rule's viewer grants, groups first, then users.")
    auth = serializers.ChoiceField(choices=AUTH_CHOICES, help_text="oauth: reached with an OAuth grant (`oauth`).")
    oauth = OAuthStateSerializer(allow_null=True, help_text="The OAuth grant's state; null unless auth is oauth. "
                                                            "Its tokens are never returned.")
    status = serializers.ChoiceField(choices=[McpServer.CONNECTED, McpServer.ERROR, McpServer.NEEDS_AUTHORIZATION])
    error = serializers.CharField(allow_blank=True)
    tools = serializers.IntegerField(help_text="How many tools the server offers (0 while it needs authorization).")


class AuthorizationSerializer(serializers.Serializer):
    status = serializers.CharField(default=McpServer.NEEDS_AUTHORIZATION)
    authorization_url = serializers.CharField(help_text="Where an admin consents, at the server's authorization "
                                                        "server; the browser then comes back to the callback.")


class ConnectAuthorizationSerializer(AuthorizationSerializer):
    server = ServerSerializer()


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


def _server_data(overview: selectors.ServerOverview, *, admin: bool) -> dict:
    server = overview.server
    data: dict = {"name": server.name, "transport": server.transport}
    if server.transport == McpServer.STDIO:
        data.update(command=server.command, args_count=len(server.args or []))
        if admin:
            data["env_keys"] = sorted(server.env or {})
    else:
        data["url"] = masked_url(server.url)
        if admin:
            data["header_names"] = sorted(server.headers or {})
    if admin:
        data.update(rule_of(server))
    return {**data, "auth": server.auth, "oauth": _oauth_state(server), "status": overview.status,
            "error": overview.error, "tools": overview.tool_count}


def _oauth_state(server: McpServer) -> dict | None:
    grant = getattr(server, "oauth", None) if server.auth == McpServer.OAUTH else None
    if grant is None:
        return None
    authorized = grant.status == McpServerOAuth.AUTHORIZED
    return {"status": grant.status, "expires_at": grant.expires_at if authorized else None,
            "scopes": (grant.scopes if authorized and grant.scopes else grant.requested_scopes).split()}


def _is_admin(request: Request) -> bool:
    return bool(request.user.is_staff)


def _stored_overview(server: McpServer) -> selectors.ServerOverview:
    return selectors.ServerOverview(server, server.status, server.error, len(server.tools or []))


# --- views ------------------------------------------------------------------------------------------

class ToolListView(APIView):
    @extend_schema(responses={200: ToolListSerializer}, summary="Every tool: built-in, plugins, MCP servers")
    def get(self, request: Request) -> Response:
        tools = async_to_sync(selectors.tools_available)(caller=ToolContext.for_user(request.user))
        listed = [{"server": selectors.tool_server(tool), "tool": {
            "name": selectors.tool_listed_name(tool), "description": tool.description,
            "inputSchema": tool.input_schema}} for tool in tools]
        return Response(ToolListSerializer({"tools": listed}).data)


class ServerListView(APIView):
    @extend_schema(responses={200: ServerListSerializer},
                   summary="The MCP servers the caller may use, and their status")
    def get(self, request: Request) -> Response:
        overview = async_to_sync(selectors.mcp_server_overview)(caller=ToolContext.for_user(request.user))
        servers = [_server_data(item, admin=_is_admin(request)) for item in overview]
        return Response(ServerListSerializer({"servers": servers}).data)


class ServerDetailView(APIView):
    permission_classes = [IsAuthenticated, IsAdmin]

    @extend_schema(request=AccessInputSerializer, responses={
        200: ServerSerializer, 404: OpenApiResponse(description="No MCP server of that name.")},
                   summary="Change who may see an MCP server and use its tools (the older way; see .../access)")
    def patch(self, request: Request, name: str) -> Response:
        data = validated(AccessInputSerializer, request.data)
        server = services.mcp_server_access_set(name=name, **data, request=request)
        return Response(ServerSerializer(_server_data(_stored_overview(server), admin=True)).data)


class ConnectView(APIView):
    permission_classes = [IsAuthenticated, IsAdmin]

    @extend_schema(request=ConnectInputSerializer, responses={
        201: ServerSerializer, 502: OpenApiResponse(description="`mcp_connect_failed`: nothing stored")},
                   summary="Connect an MCP server (stdio command or URL) and store it")
    def post(self, request: Request) -> Response:
        data = validated(ConnectInputSerializer, request.data)
        target = f"mcp:{data.get('name', '')}"
        if data.pop("auth") == McpServer.OAUTH:
            return self._oauth(request, data, target)
        try:
            server = services.mcp_server_connect(**data)
        except AppError as exc:
            audit("mcp.connect", outcome="failure", request=request, target=target, details={"code": exc.code})
            raise
        # The transport only: the command's arguments, environment, URL query and headers may hold secrets.
        audit("mcp.connect", request=request, target=target, details={"transport": server.transport})
        return Response(ServerSerializer(_server_data(_stored_overview(server), admin=True)).data,
                        status=status.HTTP_201_CREATED)

    def _oauth(self, request: Request, data: dict, target: str) -> Response:
        try:
            server, authorization_url = services.mcp_server_oauth_connect(
                **data, redirect_uri=request.build_absolute_uri(CALLBACK_PATH))
        except AppError as exc:
            audit("mcp.connect", outcome="failure", request=request, target=target, details={"code": exc.code})
            raise
        audit("mcp.connect", request=request, target=target, details={"transport": server.transport, "auth": "oauth"})
        body = {"status": McpServer.NEEDS_AUTHORIZATION, "authorization_url": authorization_url,
                "server": _server_data(_stored_overview(server), admin=True)}
        return Response(ConnectAuthorizationSerializer(body).data, status=status.HTTP_202_ACCEPTED)


class ReconnectView(APIView):
    permission_classes = [IsAuthenticated, IsAdmin]

    @extend_schema(request=None, responses={
        202: AuthorizationSerializer, 400: OpenApiResponse(description="`invalid`: not an OAuth server."),
        404: OpenApiResponse(description="No MCP server of that name.")},
                   summary="Authorize an OAuth MCP server again (a new consent)")
    def post(self, request: Request, name: str) -> Response:
        authorization_url = services.mcp_server_reconnect(name=name)
        audit("mcp.connect", request=request, target=f"mcp:{name}", details={"step": "reconnect"})
        body = {"status": McpServer.NEEDS_AUTHORIZATION, "authorization_url": authorization_url}
        return Response(AuthorizationSerializer(body).data, status=status.HTTP_202_ACCEPTED)


class OAuthCallbackView(APIView):
    """Where the remote authorization server sends the admin's browser back: public, the state is the proof."""

    permission_classes = [AllowAny]
    authentication_classes: list = []

    @extend_schema(request=None, responses={302: OpenApiResponse(
        description="To the dashboard's MCP page: `?connected=<name>` or `?oauth_error=<code>`.")},
                   summary="The OAuth callback of a remote MCP server's authorization")
    def get(self, request: Request) -> HttpResponseRedirect:
        params = request.query_params
        name, problem = services.mcp_server_oauth_complete(
            state=params.get("state", "")[:500], code=params.get("code", "")[:5000],
            error=params.get("error", "")[:100], iss=params["iss"][:2000] if "iss" in params else None)
        if problem:
            code = re.sub(r"[^a-z0-9_]", "", problem.lower())[:60] or "oauth_failed"
            audit("mcp.connect", outcome="failure", target=f"mcp:{name}", details={"step": "authorized", "code": code},
                  request=request)
            query = {"oauth_error": code, **({"server": name} if name else {})}
        else:
            audit("mcp.connect", target=f"mcp:{name}", details={"step": "authorized"}, request=request)
            query = {"connected": name}
        return HttpResponseRedirect(f"{DASHBOARD_MCP}?{urlencode(query)}")


class DisconnectView(APIView):
    permission_classes = [IsAuthenticated, IsAdmin]

    @extend_schema(request=NameSerializer, responses={
        200: DisconnectedSerializer, 404: OpenApiResponse(description="No MCP server of that name.")},
                   summary="Disconnect an MCP server (its process is stopped) and forget it")
    def post(self, request: Request) -> Response:
        data = validated(NameSerializer, request.data)
        name = data["name"]
        services.mcp_server_disconnect(name=name)
        audit("mcp.disconnect", request=request, target=f"mcp:{name}")
        return Response(DisconnectedSerializer({"name": name, "status": "disconnected"}).data)


class CallView(APIView):
    @extend_schema(request=CallInputSerializer, responses={
        200: CallOutputSerializer, 404: OpenApiResponse(description="No such server or tool."),
        502: OpenApiResponse(description="`upstream_error`: the MCP server failed")},
                   summary="Call any listed tool directly")
    def post(self, request: Request) -> Response:
        data = validated(CallInputSerializer, request.data)
        result = async_to_sync(services.mcp_tool_call)(caller=ToolContext.for_user(request.user),
                                                       server=data["server"], tool=data["tool"],
                                                       arguments=data["arguments"])
        return Response(CallOutputSerializer({"content": result.content, "is_error": result.is_error}).data)

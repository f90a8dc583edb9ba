from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit, urlunsplit

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from organisation.models import GrantBase, Shareable

# A server's tools reach the model as `<name>__<tool>`, and function names must match ^[a-zA-Z0-9_-]{1,64}$
# there; a short name without "__" leaves room for the tool's own name and keeps the prefix unambiguous.
SERVER_NAME_PATTERN = r"^(?!.*__)[A-Za-z0-9][A-Za-z0-9_-]{0,31}$"
server_name_validator = RegexValidator(
    SERVER_NAME_PATTERN, "Use 1-32 letters, digits, '-' or '_' (starting with a letter or digit, no '__').")


class McpServer(Shareable):
    """An external MCP server this service connects to as a client; its tools join the tool registry.

    Who may see it and use its tools is the organisation's access rule (organisation.policy, kind `mcp_server`):
    `private` (the default: admins only, since its tools run with the admin's configuration, secrets included),
    `everyone` (every signed-in user), or `shared` (admins and the users and groups its `viewer` grants name).
    Its `owner` is null (the deployment's), and a grant gives use only: changing a server spawns processes, so it
    stays with the admins. A caller outside the rule sees neither the server nor its tools anywhere.
    `args`, `env` and `headers` are write-only: no API returns them (a token often travels in them).
    """

    STDIO = "stdio"
    SSE = "sse"
    STREAMABLE_HTTP = "streamable-http"
    TRANSPORTS = [(STDIO, "stdio (subprocess)"), (SSE, "SSE (legacy HTTP)"), (STREAMABLE_HTTP, "Streamable HTTP")]
    CONNECTED = "connected"
    ERROR = "error"
    STATUSES = [(CONNECTED, "connected"), (ERROR, "error")]

    name = models.CharField(max_length=32, unique=True, validators=[server_name_validator])
    transport = models.CharField(max_length=20, choices=TRANSPORTS)
    command = models.CharField(max_length=1000, blank=True, default="")
    args = models.JSONField(default=list, blank=True)
    # Secrets live here (API keys for the server, a bearer token for a URL): never returned by the API.
    env = models.JSONField(default=dict, blank=True)
    headers = models.JSONField(default=dict, blank=True)
    url = models.CharField(max_length=2000, blank=True, default="")
    status = models.CharField(max_length=12, choices=STATUSES, default=CONNECTED)
    error = models.TextField(blank=True, default="")
    # The tool list from the last successful listing, so a listing can be shown before this process connects.
    tools = models.JSONField(default=list, blank=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+", help_text="Always null: the deployment's (its admins') server.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "MCP server"

    def __str__(self) -> str:
        return self.name


class McpServerGrant(GrantBase):
    """A user or a group who may use the server (role `viewer` only) while its visibility is `shared`."""

    resource = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="grants")

    class Meta:
        constraints = GrantBase.grant_constraints("mcp_server")
        verbose_name = "MCP server grant"


def masked_url(url: str) -> str:
    """The URL without user:password and with its query's values masked (tokens travel in both), for display."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    query = "&".join(f"{key}=***" for key, _value in parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


class McpHttpSession(models.Model):
    """A Streamable HTTP session of this service's MCP server (`/mcp`), kept in the database so that any process
    of the deployment answers its requests (the SDK's own sessions live in the memory of one process).

    It holds what the protocol keeps between requests: who opened it (`owner`: the principal, `user:<id>` or
    `user:<id>:key:<id>`; a request with another credential finds no such session) and the protocol version
    its `initialize` negotiated. It ends with the client's DELETE, or after a time without requests
    (mcpbridge.httpsessions).
    """

    session_id = models.CharField(max_length=32, primary_key=True)
    owner = models.CharField(max_length=100)
    protocol_version = models.CharField(max_length=32)
    created_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(db_index=True)

    class Meta:
        verbose_name = "MCP HTTP session"
        indexes = [models.Index(fields=["owner", "last_seen_at"], name="mcp_http_session_owner")]

    def __str__(self) -> str:
        return self.session_id

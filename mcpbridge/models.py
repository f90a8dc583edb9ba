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
    # An OAuth server with no usable grant (never consented, or a refresh refused): its tools are left out of
    # every listing until an admin reconnects it (mcpbridge.oauthgrant).
    NEEDS_AUTHORIZATION = "needs_authorization"
    STATUSES = [(CONNECTED, "connected"), (ERROR, "error"), (NEEDS_AUTHORIZATION, "needs authorization")]
    NO_AUTH = "none"  # fixed headers (a URL server) or env (stdio), if any
    OAUTH = "oauth"  # a grant from the server's authorization server: McpServerOAuth

    name = models.CharField(max_length=32, unique=True, validators=[server_name_validator])
    transport = models.CharField(max_length=20, choices=TRANSPORTS)
    command = models.CharField(max_length=1000, blank=True, default="")
    args = models.JSONField(default=list, blank=True)
    # Secrets live here (API keys for the server, a bearer token for a URL): never returned by the API.
    env = models.JSONField(default=dict, blank=True)
    headers = models.JSONField(default=dict, blank=True)
    url = models.CharField(max_length=2000, blank=True, default="")
    auth = models.CharField(max_length=10, default=NO_AUTH)
    status = models.CharField(max_length=20, choices=STATUSES, default=CONNECTED)
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


class McpServerOAuth(models.Model):
    """How this service authenticates to an OAuth-protected server (`auth: "oauth"`): what discovery found,
    the client registration, and the grant (mcpbridge.oauthgrant).

    Invariants: `client_secret`, `access_token` and `refresh_token` are sealed with agentsite.core.secretbox
    and no API returns or logs them; `generation` grows with every change of the tokens, and a refresh is
    claimed by a conditional update naming it (one refresh at a time across processes: remote servers rotate
    refresh tokens and detect their reuse).
    """

    AUTHORIZED = "authorized"
    NEEDS_AUTHORIZATION = "needs_authorization"

    server = models.OneToOneField(McpServer, on_delete=models.CASCADE, primary_key=True, related_name="oauth")
    status = models.CharField(max_length=20, default=NEEDS_AUTHORIZATION)
    resource = models.CharField(max_length=2000, help_text="The RFC 8707 resource the tokens are for.")
    issuer = models.CharField(max_length=2000, blank=True, default="")
    # RFC 9207: the authorization server's metadata says it names itself (`iss`) in each authorization response,
    # so a callback without `iss` is refused as one with another issuer is.
    issuer_in_response = models.BooleanField(default=False)
    authorization_endpoint = models.CharField(max_length=2000)
    token_endpoint = models.CharField(max_length=2000)
    client_id = models.CharField(max_length=1000)
    client_secret = models.TextField(blank=True, default="", help_text="Sealed (secretbox); empty for a public "
                                                                       "client.")
    token_endpoint_auth_method = models.CharField(max_length=40, default="none")
    redirect_uri = models.CharField(max_length=2000)
    requested_scopes = models.CharField(max_length=1000, blank=True, default="")
    access_token = models.TextField(blank=True, default="", help_text="Sealed (secretbox).")
    refresh_token = models.TextField(blank=True, default="", help_text="Sealed (secretbox).")
    expires_at = models.DateTimeField(null=True, blank=True)
    scopes = models.CharField(max_length=1000, blank=True, default="", help_text="The scopes granted.")
    generation = models.PositiveIntegerField(default=0)
    refreshing_until = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "MCP server OAuth grant"

    def __str__(self) -> str:
        return f"OAuth of {self.server_id}"


class McpOAuthFlow(models.Model):
    """An authorization started and not yet completed: found by the SHA-256 of its `state` (the state itself is
    not kept), used once, and good for ten minutes. In the database so that the callback completes it on any
    process or host. `code_verifier` (PKCE) is sealed (secretbox)."""

    state_digest = models.CharField(max_length=64, primary_key=True)
    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="+")
    code_verifier = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        verbose_name = "MCP OAuth flow"

    def __str__(self) -> str:
        return f"OAuth flow for {self.server_id}"

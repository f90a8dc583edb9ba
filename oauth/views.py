"""The OAuth endpoints outside /api: the metadata documents (RFC 9728, RFC 8414), registration (RFC 7591), the
authorization endpoint (which hands the browser to the dashboard's consent page), the token endpoint and
revocation (RFC 7009). Thin: Authlib (oauth.server) checks the protocol. Their errors are OAuth's own
`{error, error_description}` (RFC 6749 §5.2), which OAuth clients read; the metadata answer JSON always."""

from __future__ import annotations

import base64
import json
import logging
from typing import Any
from urllib.parse import urlsplit

from authlib.oauth2 import OAuth2Error
from authlib.oauth2.rfc6749.requests import JsonPayload, JsonRequest
from authlib.oauth2.rfc7591 import ClientRegistrationEndpoint
from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.template.loader import render_to_string
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.views import APIView

from accounts import ratelimit
from accounts.authentication import key_digest
from agentsite.core.audit import audit
from agentsite.core.errors import AppError, ErrorShape
from agentsite.core.jsonbody import json_loads_bounded
from agentsite.core.validation import storable
from oauth.models import Client
from oauth.resource import MCP, RESOURCES, SCOPES, ProtectedResource, origin_of
from oauth.server import consent_create, server, with_issuer
from oauth.tokens import SECRET_PREFIX, new_secret
from oauth.trim import expired_rows_trim

logger = logging.getLogger(__name__)

CONSENT_ROUTE = "/#/consent/"
AUTH_METHODS = ["none", "client_secret_post", "client_secret_basic"]
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
MAX_REDIRECT_URIS = 10
MAX_CLIENT_NAME = 200
MAX_URI = 2000
MAX_REGISTRATION_BYTES = 64 * 1024
# RFC 7591 §2's informational metadata that is kept (shown, never trusted): strings.
INFORMATIONAL = ("client_uri", "logo_uri", "tos_uri", "policy_uri", "software_id", "software_version")
PAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


def issuer(request: HttpRequest) -> str:
    """This authorization server's identifier: the origin the request was made to."""
    return origin_of(request.build_absolute_uri("/"))


def _json(body: dict[str, Any], status: int = 200, **headers: str) -> JsonResponse:
    response = JsonResponse(body, status=status)
    response["Cache-Control"] = "no-store"
    for name, value in headers.items():
        response[name.replace("_", "-")] = value
    return response


# The longest value any protocol parameter may have (a redirect URI's bound; state and the rest fit in it).
MAX_PARAMETER_CHARS = 2000


UNECHOABLE = ("A parameter holds a character that OAuth's error descriptions may not carry (only printable ASCII "
              "but \" and \\, RFC 6749 Appendix A).")


def parameters_problem(request: HttpRequest) -> str | None:
    """Why a request's query and form parameters cannot be OAuth's (None: they may be): each is at most
    MAX_PARAMETER_CHARS (a consent keeps them for ten minutes). What a value may hold is the protocol's to judge
    (oauth.server); one Authlib cannot echo in its error's description (non-ASCII, " or \\) is caught around
    its calls (UNECHOABLE)."""
    for source in (request.GET, request.POST):
        for name, values in source.lists():
            if any(len(value) > MAX_PARAMETER_CHARS for value in (name, *values)):
                return f"A parameter ({name[:40]!r}) is longer than {MAX_PARAMETER_CHARS} characters."
    return None


def basic_problem(request: HttpRequest) -> str | None:
    """Why an `Authorization: Basic` header cannot carry client credentials (None: it can, or there is none)."""
    header = request.headers.get("Authorization", "")
    if not header.lower().startswith("basic "):
        return None
    try:
        decoded = base64.b64decode(header[6:].strip(), validate=True).decode("ascii")
    except (ValueError, UnicodeDecodeError):
        return "The Basic credentials are not base64 of ASCII client_id:client_secret."
    if ":" not in decoded or not decoded.isprintable():
        return "The Basic credentials are not client_id:client_secret."
    return None


def _oauth_error(error: str, description: str, status: int = 400, **headers: str) -> JsonResponse:
    return _json({"error": error, "error_description": description}, status, **headers)


def protected_resource_metadata(request: HttpRequest, resource: ProtectedResource = MCP) -> JsonResponse:
    """RFC 9728: `resource` (the MCP endpoint, or the A2A endpoints) as a protected resource, and where to get its
    tokens."""
    origin = issuer(request)
    return JsonResponse({
        "resource": resource.url(origin), "authorization_servers": [origin], "scopes_supported": [resource.scope],
        "bearer_methods_supported": ["header"], "resource_name": resource.name,
        "resource_documentation": f"{origin}/api/docs"})


def authorization_server_metadata(request: HttpRequest) -> JsonResponse:
    """RFC 8414: the endpoints and what they support."""
    origin = issuer(request)
    return JsonResponse({
        "issuer": origin, "authorization_endpoint": f"{origin}/oauth/authorize",
        "token_endpoint": f"{origin}/oauth/token", "registration_endpoint": f"{origin}/oauth/register",
        "revocation_endpoint": f"{origin}/oauth/revoke", "scopes_supported": list(SCOPES),
        "response_types_supported": ["code"], "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": AUTH_METHODS,
        "revocation_endpoint_auth_methods_supported": AUTH_METHODS,
        "authorization_response_iss_parameter_supported": True,
        "protected_resources": [resource.url(origin) for resource in RESOURCES]})


def redirect_uri_problem(uri: Any) -> str | None:
    """Why a redirect URI may not be registered (None: it may): https, or http to a loopback address only; no
    fragment."""
    if not isinstance(uri, str) or not uri or len(uri) > MAX_URI:
        return f"Each redirect URI is a string of at most {MAX_URI} characters."
    if not uri.isascii() or any(char.isspace() or not char.isprintable() for char in uri):
        return "A redirect URI is ASCII without spaces or control characters (RFC 3986)."
    if "#" in uri:
        return f"{uri!r} has a fragment, which a redirect URI may not have."
    try:
        parts = urlsplit(uri)
        host = parts.hostname
    except ValueError:
        return f"{uri!r} is not a URL."
    if parts.scheme == "https" and host:
        return None
    if parts.scheme == "http" and host in LOOPBACK_HOSTS:
        return None
    return f"{uri!r} is neither https nor http to a loopback address (127.0.0.1, [::1], localhost)."


class Registration(ClientRegistrationEndpoint):
    """RFC 7591, open to anyone (a connector registers before any user is known): the client is stored, and its
    secret, if it asked for one, shown once."""

    def authenticate_token(self, request: Any) -> bool:
        return True

    def get_server_metadata(self) -> dict[str, Any]:
        return {"scopes_supported": list(SCOPES), "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "refresh_token"],
                "token_endpoint_auth_methods_supported": AUTH_METHODS}

    def create_endpoint_request(self, request: Any) -> Any:
        """`register` hands over the registration it checked (JsonRequest), not the raw body."""
        return request if isinstance(request, JsonRequest) else super().create_endpoint_request(request)

    def generate_client_secret(self, request: Any) -> str | None:
        method = request.payload.data.get("token_endpoint_auth_method", "client_secret_basic")
        return None if method == "none" else new_secret(SECRET_PREFIX)

    def save_client(self, client_info: dict, client_metadata: dict, request: Any) -> Client:
        secret = client_info.get("client_secret")
        extra = {key: value for key, value in client_metadata.items() if key in (*INFORMATIONAL, "contacts")}
        return Client.objects.create(
            client_id=client_info["client_id"], secret_hash=key_digest(secret) if secret else "",
            name=str(client_metadata.get("client_name") or "Unnamed client")[:MAX_CLIENT_NAME],
            redirect_uris=client_metadata["redirect_uris"],
            auth_method=client_metadata.get("token_endpoint_auth_method", "client_secret_basic"),
            grant_types=client_metadata.get("grant_types", ["authorization_code"]),
            response_types=client_metadata.get("response_types", ["code"]),
            scope=client_metadata["scope"], metadata=extra)


_registration = Registration(server)


def _registration_problem(data: Any) -> tuple[str, str] | None:
    """(the RFC 7591 error code, why) when a registration may not be stored as given; None when it may."""
    if not isinstance(data, dict):
        return "invalid_client_metadata", "The registration is a JSON object (RFC 7591)."
    uris = data.get("redirect_uris")
    if not isinstance(uris, list) or not uris or len(uris) > MAX_REDIRECT_URIS:
        return "invalid_redirect_uri", f"redirect_uris is a list of 1 to {MAX_REDIRECT_URIS} URIs."
    for uri in uris:
        problem = redirect_uri_problem(uri)
        if problem:
            return "invalid_redirect_uri", problem
    problem = _metadata_problem(data)
    return ("invalid_client_metadata", problem) if problem else None


def _informational_problem(data: dict[str, Any]) -> str | None:
    for name in INFORMATIONAL:
        value = data.get(name)
        if value is not None and not _storable_text(value, MAX_URI):
            return f"{name} is a string of at most {MAX_URI} characters."
    contacts = data.get("contacts")
    if contacts is not None and (not isinstance(contacts, list) or len(contacts) > MAX_REDIRECT_URIS
                                 or not all(_storable_text(contact, MAX_URI) for contact in contacts)):
        return f"contacts is a list of at most {MAX_REDIRECT_URIS} strings."
    return None


def _storable_text(value: Any, limit: int) -> bool:
    """A string of at most `limit` characters that every database holds."""
    return isinstance(value, str) and len(value) <= limit and storable(value)


def _registration_kept(data: dict[str, Any]) -> dict[str, Any]:
    """The metadata this server stores (its defaults filled in, as RFC 7591 §3.2.1 answers them); the rest
    (jwks, software_statement, ...) is ignored, as §2 allows."""
    kept = {name: data[name] for name in (*INFORMATIONAL, "client_name", "contacts", "redirect_uris", "scope")
            if data.get(name) is not None}
    kept.update(token_endpoint_auth_method=data.get("token_endpoint_auth_method", "client_secret_basic"),
                grant_types=data.get("grant_types", ["authorization_code"]), response_types=["code"],
                scope=_registered_scope(data.get("scope")))
    return kept


def _registered_scope(scope: str | None) -> str:
    """The scopes a client registers for: those it named (a checked subset of SCOPES), else every one. Each
    authorization still asks the user for one resource's scope (oauth.server)."""
    named = set((scope or "").split()) or set(SCOPES)
    return " ".join(known for known in SCOPES if known in named)


def _metadata_problem(data: dict[str, Any]) -> str | None:
    method = data.get("token_endpoint_auth_method", "client_secret_basic")
    if method not in AUTH_METHODS:
        return f"token_endpoint_auth_method must be one of {', '.join(AUTH_METHODS)}."
    grant_types = data.get("grant_types", ["authorization_code"])
    if not isinstance(grant_types, list) or not all(isinstance(grant, str) for grant in grant_types) \
            or not set(grant_types) <= {"authorization_code", "refresh_token"} \
            or "authorization_code" not in grant_types:
        return "grant_types may be authorization_code and refresh_token (authorization_code included)."
    if data.get("response_types", ["code"]) != ["code"]:
        return "response_types may only be [\"code\"]."
    scope = data.get("scope", "")
    if not isinstance(scope, str) or not set(scope.split()) <= set(SCOPES):
        return f"The scopes are {', '.join(SCOPES)}."
    if not _storable_text(data.get("client_name", ""), MAX_CLIENT_NAME):
        return f"client_name is a string of at most {MAX_CLIENT_NAME} characters."
    return _informational_problem(data)


def register(request: HttpRequest) -> HttpResponse:
    """POST /oauth/register: a client registers itself (RFC 7591), within the rate limit of its address."""
    ip = ratelimit.client_ip(request)
    try:
        ratelimit.oauth_register_check(ip=ip, limit=int(settings.AGENTSITE_OAUTH_REGISTER_RATE))
    except AppError as exc:
        return _oauth_error("rate_limited", exc.message, 429, Retry_After=str(exc.details["retry_after"]))
    if request.content_type != "application/json":
        return _oauth_error("invalid_client_metadata", "Send the registration as application/json (RFC 7591).")
    if len(request.body) > MAX_REGISTRATION_BYTES:
        return _oauth_error("invalid_client_metadata", f"A registration is at most {MAX_REGISTRATION_BYTES} bytes.")
    try:
        data = json_loads_bounded(request.body or b"null")
    except AppError as exc:
        return _oauth_error("invalid_client_metadata", exc.message)
    problem = _registration_problem(data)
    if problem:
        return _oauth_error(*problem)
    checked = JsonRequest(request.method, request.build_absolute_uri(), request.headers)
    checked.payload = _Registered(_registration_kept(data))
    response = server.create_endpoint_response(_registration.ENDPOINT_NAME, checked)
    if response.status_code != 201:
        return response
    expired_rows_trim()
    body = json.loads(response.content)
    if body.get("client_secret") is None:  # a public client: no secret was issued (RFC 7591 §3.2.1)
        body.pop("client_secret", None)
        body.pop("client_secret_expires_at", None)
    Client.objects.filter(client_id=body["client_id"]).update(registered_from=ip[:64])
    audit("oauth.client_registered", request=request, door="oauth", target=f"oauth_client:{body['client_id']}",
          details={"client_name": body.get("client_name", ""), "redirect_uris": body.get("redirect_uris", [])})
    return _json(body, 201)


class _Registered(JsonPayload):
    """A registration as `register` checked it, for Authlib."""

    def __init__(self, data: dict[str, Any]):
        self._data = data

    @property
    def data(self) -> dict[str, Any]:
        return self._data


server.register_endpoint(_registration)


def authorize(request: HttpRequest) -> HttpResponse:
    """GET /oauth/authorize: check the request, keep it, and send the browser to the dashboard's consent page.
    A request whose client or redirect URI does not check out is shown an error page (never redirected)."""
    problem = parameters_problem(request)
    if problem:
        return error_page("invalid_request", problem)
    ip = ratelimit.client_ip(request)
    try:
        ratelimit.oauth_authorize_check(ip=ip, limit=int(settings.AGENTSITE_OAUTH_AUTHORIZE_RATE))
    except AppError as exc:
        response = error_page("rate_limited", exc.message, 429)
        response["Retry-After"] = str(exc.details["retry_after"])
        return response
    try:
        grant = server.get_consent_grant(request)
    except ValueError:  # Authlib's error would echo a value its descriptions may not hold (UNECHOABLE)
        return error_page("invalid_request", UNECHOABLE)
    except OAuth2Error as error:
        if error.redirect_uri:
            response = server.handle_error_response(server.create_oauth2_request(request), error)
            response["Location"] = with_issuer(response["Location"], issuer(request))
            return response
        return error_page(error.error, error.description or "The authorization request is not valid.")
    consent = consent_create(grant)
    response = HttpResponseRedirect(CONSENT_ROUTE + consent.pk)
    response["Cache-Control"] = "no-store"
    return response


def error_page(error: str, description: str, status: int = 400) -> HttpResponse:
    """The page a browser sees when an authorization request cannot be sent back to its client."""
    body = render_to_string("oauth/error.html", {"error": error, "description": description})
    response = HttpResponse(body, status=status, content_type="text/html; charset=utf-8")
    response["Content-Security-Policy"] = PAGE_CSP
    response["Cache-Control"] = "no-store"
    return response


def token(request: HttpRequest) -> HttpResponse:
    """POST /oauth/token: a code or a refresh token for tokens."""
    refused = _form_refused(request)
    try:
        return refused or server.create_token_response(request)
    except ValueError:  # as in authorize
        return _oauth_error("invalid_request", UNECHOABLE)


def revoke(request: HttpRequest) -> HttpResponse:
    """POST /oauth/revoke (RFC 7009): 200 whether or not the token was known."""
    refused = _form_refused(request)
    try:
        return refused or server.create_endpoint_response("revocation", request)
    except ValueError:  # as in authorize
        return _oauth_error("invalid_request", UNECHOABLE)


def _form_refused(request: HttpRequest) -> HttpResponse | None:
    """The token and revocation endpoints' refusal of what Authlib cannot read (None: it can)."""
    problem = parameters_problem(request)
    if problem:
        return _oauth_error("invalid_request", problem)
    problem = basic_problem(request)
    if problem:
        return _oauth_error("invalid_client", problem, 401, WWW_Authenticate='Basic realm="oauth"')
    return None


# --- the DRF views that route to them (documented in /api/schema; no credential is read) ----------------

class OAuthErrorSerializer(serializers.Serializer):
    """OAuth's error shape (RFC 6749 §5.2), which OAuth clients read."""

    error = serializers.CharField()
    error_description = serializers.CharField(required=False)


def oauth_error_body(code: str, message: str, status: int, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A refusal made before a view (a body over the limit, ...) in OAuth's shape."""
    return {"error": {400: "invalid_request", 401: "invalid_client"}.get(status, code), "error_description": message}


ERROR_SHAPE = ErrorShape("/oauth", oauth_error_body, OAuthErrorSerializer)
JSON_DOCUMENT = OpenApiResponse(response=OpenApiTypes.OBJECT, description="The metadata document (JSON).")
FORM = "application/x-www-form-urlencoded"


class _Public(APIView):
    permission_classes = [AllowAny]
    authentication_classes: list = []


class ProtectedResourceMetadataView(_Public):
    """GET /.well-known/oauth-protected-resource[/mcp] and /.well-known/oauth-protected-resource/a2a (RFC 9728):
    `resource` says which (oauth.urls)."""

    resource: ProtectedResource = MCP

    @extend_schema(responses={200: JSON_DOCUMENT})
    def get(self, request: Request) -> HttpResponse:
        return protected_resource_metadata(request._request, self.resource)


class AuthorizationServerMetadataView(_Public):
    """GET /.well-known/oauth-authorization-server (RFC 8414)."""

    @extend_schema(responses={200: JSON_DOCUMENT})
    def get(self, request: Request) -> HttpResponse:
        return authorization_server_metadata(request._request)


class RegisterView(_Public):
    """POST /oauth/register (RFC 7591)."""

    @extend_schema(request=OpenApiTypes.OBJECT, responses={
        201: OpenApiResponse(OpenApiTypes.OBJECT, description="The client's information (RFC 7591 §3.2.1)."),
        400: OpenApiResponse(OAuthErrorSerializer, description="invalid_redirect_uri, invalid_client_metadata"),
        429: OpenApiResponse(OAuthErrorSerializer, description="rate_limited (Retry-After)")})
    def post(self, request: Request) -> HttpResponse:
        return register(request._request)


class AuthorizeView(_Public):
    """GET /oauth/authorize: to the dashboard's consent page."""

    @extend_schema(parameters=[OpenApiParameter(name, str) for name in (
        "response_type", "client_id", "redirect_uri", "code_challenge", "code_challenge_method", "resource",
        "scope", "state")], responses={
        302: OpenApiResponse(description="To the consent page, or back to the client with an error."),
        (400, "text/html"): OpenApiResponse(OpenApiTypes.STR, description="The client or redirect URI is unknown."),
        (429, "text/html"): OpenApiResponse(OpenApiTypes.STR, description="rate_limited (Retry-After): too many "
                                                                          "authorization requests from the address.")})
    def get(self, request: Request) -> HttpResponse:
        return authorize(request._request)


class TokenView(_Public):
    """POST /oauth/token."""

    @extend_schema(request={FORM: OpenApiTypes.OBJECT}, responses={
        200: OpenApiResponse(OpenApiTypes.OBJECT, description="{access_token, token_type, expires_in, "
                                                              "refresh_token, scope}"),
        400: OpenApiResponse(OAuthErrorSerializer, description="invalid_grant, invalid_request, invalid_target"),
        401: OpenApiResponse(OAuthErrorSerializer, description="invalid_client")})
    def post(self, request: Request) -> HttpResponse:
        return token(request._request)


class RevokeView(_Public):
    """POST /oauth/revoke (RFC 7009)."""

    @extend_schema(request={FORM: OpenApiTypes.OBJECT}, responses={
        200: OpenApiResponse(OpenApiTypes.OBJECT, description="{} (also for an unknown token)"),
        401: OpenApiResponse(OAuthErrorSerializer, description="invalid_client")})
    def post(self, request: Request) -> HttpResponse:
        return revoke(request._request)

"""Serializers and thin views for /api/oauth: the consent a signed-in user gives (or refuses) an app, and the apps
connected to the user's account (their grants), which the user, or an admin, revokes."""

from __future__ import annotations

from urllib.parse import urlsplit

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.models import ApiKey
from agentsite.core.audit import audit
from agentsite.core.errors import AppError
from agentsite.core.validation import validated
from oauth import selectors, services
from oauth.models import SCOPE, ConsentRequest
from oauth.resource import RESOURCES, resource_named
from oauth.server import consent_decide, consent_take
from oauth.views import issuer

SCOPE_DESCRIPTIONS = {resource.scope: resource.allows for resource in RESOURCES}


def _dashboard_only(request: Request, what: str) -> None:
    """A consent or a grant's revocation is the user's own act on the dashboard: an API key may not do it."""
    if isinstance(request.auth, ApiKey):
        raise AppError("forbidden", f"{what} needs a dashboard sign-in, not an API key.", 403)


def _consent(consent_id: str) -> ConsentRequest:
    consent = ConsentRequest.objects.select_related("client").filter(pk=consent_id).first()
    if consent is None or consent.is_expired():
        raise AppError("not_found", "This authorization request is unknown, decided or expired: start it again "
                                    "from the app.", 404)
    return consent


class ConsentClientSerializer(serializers.Serializer):
    client_id = serializers.CharField()
    name = serializers.CharField()
    client_uri = serializers.CharField(allow_blank=True)
    redirect_host = serializers.CharField(help_text="Where the browser goes after the decision.")


class ConsentSerializer(serializers.Serializer):
    id = serializers.CharField()
    client = ConsentClientSerializer()
    scope = serializers.ListField(child=serializers.DictField(), help_text="[{name, description}]")
    resource = serializers.CharField()
    expires_at = serializers.DateTimeField()


def consent_data(consent: ConsentRequest) -> dict:
    client, params = consent.client, consent.params
    redirect = params.get("redirect_uri") or client.get_default_redirect_uri() or ""
    # What is granted is the resource's scope (oauth.server checked the request against it), asked for or not.
    resource = resource_named(params.get("resource", ""), params.get("resource", ""))
    scope = [resource.scope] if resource else (params.get("scope") or SCOPE).split()
    return {"id": consent.pk, "client": {
        "client_id": client.client_id, "name": client.name, "client_uri": str(client.metadata.get("client_uri", "")),
        "redirect_host": urlsplit(redirect).netloc}, "resource": params.get("resource", ""),
        "scope": [{"name": name, "description": SCOPE_DESCRIPTIONS.get(name, name)} for name in scope],
        "expires_at": consent.expires_at}


class ConsentDecisionSerializer(serializers.Serializer):
    allow = serializers.BooleanField(help_text="true: issue a code to the app; false: tell it access_denied.")


class RedirectSerializer(serializers.Serializer):
    redirect_to = serializers.CharField(help_text="The app's redirect URI with the code (or the error): go there.")


class ConsentView(APIView):
    @extend_schema(responses={200: ConsentSerializer, 404: OpenApiResponse(description="unknown or expired")})
    def get(self, request: Request, consent_id: str) -> Response:
        """What the app asks for, for the consent page: its name, where it sends the browser, the scope."""
        return Response(ConsentSerializer(consent_data(_consent(consent_id))).data)

    @extend_schema(request=ConsentDecisionSerializer, responses={
        200: RedirectSerializer, 403: OpenApiResponse(description="forbidden: an API key may not decide"),
        404: OpenApiResponse(description="unknown, decided or expired")})
    def post(self, request: Request, consent_id: str) -> Response:
        """The user's decision, once: allowed, a code for the app bound to this user; refused, access_denied."""
        _dashboard_only(request, "Authorizing an app")
        data = validated(ConsentDecisionSerializer, request.data)
        consent = consent_take(consent_id)
        if consent is None:
            _consent(consent_id)  # raises the 404
        assert consent is not None
        location = consent_decide(consent, request.user if data["allow"] else None, issuer(request))
        audit("oauth.consent", request=request, door="api", outcome="success" if data["allow"] else "refused",
              target=f"oauth_client:{consent.client.client_id}", details={"client_name": consent.client.name})
        return Response({"redirect_to": location})


class ConnectedAppSerializer(serializers.Serializer):
    client_id = serializers.CharField()
    name = serializers.CharField()
    redirect_host = serializers.CharField()
    scope = serializers.CharField(help_text="The scope of its first live grant.")
    resource = serializers.CharField(help_text="The resource of its first live grant.")
    resources = serializers.ListField(child=serializers.CharField(),
                                      help_text="The resources of all its live grants (<origin>/mcp, <origin>/a2a).")
    user = serializers.DictField(help_text="{id, username}")
    connected_at = serializers.DateTimeField(help_text="When the user first authorized it (of its live grants).")
    last_used_at = serializers.DateTimeField(allow_null=True)
    expires_at = serializers.DateTimeField(help_text="When its last refresh token ends unless used.")


class ConnectedAppListSerializer(serializers.Serializer):
    results = ConnectedAppSerializer(many=True)


class ConnectedAppListView(APIView):
    @extend_schema(parameters=[OpenApiParameter("user", int, description="Admins: another user's apps.")],
                   responses={200: ConnectedAppListSerializer,
                              400: OpenApiResponse(description="invalid: `user` is not a user id"),
                              403: OpenApiResponse(description="forbidden: `user` from a non-admin")})
    def get(self, request: Request) -> Response:
        """The apps connected to the caller's account (an admin: `?user=<id>`), one per client."""
        user_id = selectors.user_param(request)
        return Response({"results": ConnectedAppSerializer(selectors.connected_apps(user_id), many=True).data})


class ConnectedAppDetailView(APIView):
    @extend_schema(parameters=[OpenApiParameter("user", int, description="Admins: another user's app.")],
                   responses={204: None, 400: OpenApiResponse(description="invalid: `user` is not a user id"),
                              403: OpenApiResponse(description="forbidden: an API key, or `user` from a non-admin"),
                              404: OpenApiResponse(description="no such connected app")})
    def delete(self, request: Request, client_id: str) -> Response:
        """Disconnect the app: every token it holds for the user ends now, in every process."""
        _dashboard_only(request, "Disconnecting an app")
        user_id = selectors.user_param(request)
        if not services.app_disconnect(user_id=user_id, client_id=client_id, request=request):
            raise AppError("not_found", "No app with this client id is connected to this account.", 404)
        return Response(status=204)

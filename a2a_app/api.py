"""Serializers and thin views for /api/a2a/remotes: list and read (any signed-in caller, within the remotes' access
rule), register, fetch the card again and remove (admins). Header values are write-only: admins see their names."""

from __future__ import annotations

from typing import Any

from django.core.validators import URLValidator
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from a2a_app import selectors, services
from a2a_app.models import REMOTE_NAME_PATTERN, A2ARemote
from a2a_app.remotes import tool_name
from accounts.api import IsAdmin
from agentsite.agent.tooltypes import ToolContext
from agentsite.core.audit import audit
from agentsite.core.errors import AppError
from agentsite.core.validation import validated_by_path
from organisation.access import MAX_GRANTS, GrantOutSerializer, GrantSerializer, rule_of
from organisation.models import PRIVATE, VISIBILITIES

# --- serializers ------------------------------------------------------------------------------------


class AccessInputSerializer(serializers.Serializer):
    visibility = serializers.ChoiceField(choices=VISIBILITIES, help_text=(
        "private (the default: admins only), everyone (every signed-in user), or shared (admins and the grants)."))
    grants = GrantSerializer(many=True, required=False, default=list, max_length=MAX_GRANTS,
                             help_text="Viewer grants to users or groups (visibility shared).")


class RemoteInputSerializer(serializers.Serializer):
    name = serializers.RegexField(REMOTE_NAME_PATTERN, max_length=48, help_text="The tool is a2a_<name>.",
                                  error_messages={"invalid": "Use 1-48 letters, digits, '-' or '_', starting with a "
                                                             "letter or digit."})
    url = serializers.URLField(max_length=2000, validators=[URLValidator(schemes=["http", "https"])], help_text=(
        "The agent card's URL (a path ending in .json), or the agent's base URL: its card is then read from "
        "<url>/.well-known/agent-card.json."))
    headers = serializers.DictField(child=serializers.CharField(max_length=8000, trim_whitespace=False),
                                    required=False, default=dict, help_text=(
                                        "HTTP headers sent with every request to the remote, the card's included, "
                                        "e.g. Authorization (kept secret: never returned)."))
    access = AccessInputSerializer(required=False, help_text="Who may use it (default: private, admins only).")


class SkillSerializer(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    tags = serializers.ListField(child=serializers.CharField())


class RemoteSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    tool = serializers.CharField(help_text="The tool's name: a2a_<name>.")
    url = serializers.CharField(help_text="As registered.")
    description = serializers.CharField(allow_blank=True, help_text="The card's.")
    version = serializers.CharField(allow_blank=True, help_text="The card's.")
    streaming = serializers.BooleanField(help_text="The card says it streams: calls are streamed.")
    skills = SkillSerializer(many=True)
    visibility = serializers.ChoiceField(choices=VISIBILITIES, required=False, help_text="Admins only.")
    grants = GrantOutSerializer(many=True, required=False, help_text="Admins only: the rule's viewer grants.")
    header_names = serializers.ListField(child=serializers.CharField(), required=False,
                                         help_text="Admins only: the names of the headers set (never a value).")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class RemoteListSerializer(serializers.Serializer):
    remotes = RemoteSerializer(many=True)


def remote_data(remote: A2ARemote, *, admin: bool) -> dict[str, Any]:
    data: dict[str, Any] = {"id": remote.pk, "name": remote.name, "tool": tool_name(remote.name), "url": remote.url,
                            **selectors.card_summary(remote.card or {})}
    if admin:
        data.update(rule_of(remote), header_names=sorted(remote.headers or {}))
    return {**data, "created_at": remote.created_at, "updated_at": remote.updated_at}


def _input(data: Any) -> dict[str, Any]:
    """The body's fields, a nested field's error named by its path (`access.visibility`, `access.grants.0.user`)."""
    return validated_by_path(RemoteInputSerializer, data)


def _admin(request: Request) -> bool:
    return bool(request.user.is_staff)


def _caller(request: Request) -> ToolContext:
    return ToolContext.for_user(request.user)


class _AdminWrites(APIView):
    """Reading is any signed-in caller's; anything else, an admin's (403 `forbidden` before any lookup)."""

    def get_permissions(self) -> list[BasePermission]:
        if self.request is not None and self.request.method in ("GET", "HEAD", "OPTIONS"):
            return [IsAuthenticated()]
        return [IsAuthenticated(), IsAdmin()]


# --- views ------------------------------------------------------------------------------------------

UNREACHABLE = OpenApiResponse(description="`remote_unreachable`: the card could not be read (connect error, "
                                          "timeout, a status other than 200, too large). Nothing is stored.")
CARD_INVALID = OpenApiResponse(description="`card_invalid`: not an A2A agent card (the reason in the message).")


class RemoteListView(_AdminWrites):
    @extend_schema(responses={200: RemoteListSerializer}, summary="The remote A2A agents the caller may use",
                   operation_id="api_a2a_remotes_list")
    def get(self, request: Request) -> Response:
        remotes = selectors.remotes_usable_by(_caller(request)).prefetch_related("grants")
        body = {"remotes": [remote_data(remote, admin=_admin(request)) for remote in remotes]}
        return Response(RemoteListSerializer(body).data)

    @extend_schema(request=RemoteInputSerializer,
                   responses={201: RemoteSerializer, 502: UNREACHABLE, 422: CARD_INVALID},
                   summary="Register a remote A2A agent (its card is fetched and checked) as the tool a2a_<name>")
    def post(self, request: Request) -> Response:
        data = _input(request.data)
        access = data.get("access") or {"visibility": PRIVATE, "grants": []}
        target = f"a2a_remote:{data['name']}"
        try:
            remote = services.remote_create(name=data["name"], url=data["url"], headers=dict(data["headers"]),
                                            visibility=access["visibility"],
                                            grants=[dict(grant) for grant in access.get("grants", [])])
        except AppError as exc:
            audit("a2a_remote.create", outcome="failure", request=request, target=target, details={"code": exc.code})
            raise
        # Neither the URL nor the headers: a query string, user:password or a header may hold a secret.
        audit("a2a_remote.create", request=request, target=f"a2a_remote:{remote.pk}",
              details={"name": remote.name, "card": str(remote.card.get("name", ""))})
        return Response(RemoteSerializer(remote_data(remote, admin=True)).data, status=status.HTTP_201_CREATED)


def _admin_only(request: Request) -> None:
    """After the lookup (a remote the caller may not see is 404): changing one is the admins' (403 `forbidden`)."""
    if not _admin(request):
        raise AppError("forbidden", IsAdmin.message, 403)


class RemoteDetailView(APIView):
    """A remote by id: read by those its rule lets in; removed by admins. The lookup comes first, so a remote the
    caller may not see is 404 whatever the method (the organisation's rule), and one they see 403 to change."""

    permission_classes = [IsAuthenticated]

    @extend_schema(responses={200: RemoteSerializer, 404: OpenApiResponse(description="None the caller may use.")},
                   summary="A remote A2A agent")
    def get(self, request: Request, remote_id: int) -> Response:
        remote = selectors.remote_get_for(caller=_caller(request), remote_id=remote_id)
        return Response(RemoteSerializer(remote_data(remote, admin=_admin(request))).data)

    @extend_schema(request=None, responses={204: None, 403: OpenApiResponse(description="`forbidden`: not an admin."),
                                            404: OpenApiResponse(description="None the caller may see.")},
                   summary="Remove a remote A2A agent (its tool goes with it)")
    def delete(self, request: Request, remote_id: int) -> Response:
        remote = selectors.remote_get_for(caller=_caller(request), remote_id=remote_id)
        _admin_only(request)
        services.remote_delete(remote=remote)
        audit("a2a_remote.delete", request=request, target=f"a2a_remote:{remote_id}", details={"name": remote.name})
        return Response(status=status.HTTP_204_NO_CONTENT)


class RemoteRefreshView(APIView):
    """An admin fetches a remote's card again (the lookup first, as RemoteDetailView)."""

    permission_classes = [IsAuthenticated]

    @extend_schema(request=None, responses={200: RemoteSerializer, 502: UNREACHABLE, 422: CARD_INVALID,
                                            403: OpenApiResponse(description="`forbidden`: not an admin."),
                                            404: OpenApiResponse(description="None the caller may see.")},
                   summary="Fetch a remote A2A agent's card again")
    def post(self, request: Request, remote_id: int) -> Response:
        remote = selectors.remote_get_for(caller=_caller(request), remote_id=remote_id)
        _admin_only(request)
        target = f"a2a_remote:{remote_id}"
        try:
            remote = services.remote_refresh(remote=remote)
        except AppError as exc:
            audit("a2a_remote.refresh", outcome="failure", request=request, target=target, details={"code": exc.code})
            raise
        audit("a2a_remote.refresh", request=request, target=target, details={"name": remote.name})
        return Response(RemoteSerializer(remote_data(remote, admin=True)).data)

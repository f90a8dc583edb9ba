"""The access rule of a shareable resource over HTTP: read and replace it, hand the resource over.

`GET <resource>/:id/access` answers `{visibility, grants: [{group?, user?, name, role}]}` to the owner, admins
and editors (a viewer: 403; an outsider: 404). `PUT` replaces the rule whole (owner and admins only) and
`POST <resource>/:id/transfer {user}` hands the resource to another active user; both are audited with the
before and after. An app mounts them with `access_urls(prefix, kind, converter)`; the path names an object by its
primary key, or by the field its kind's `lookup` says (an MCP server by its name).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.urls import URLPattern, path
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentsite.core import invalidation
from agentsite.core.audit import audit
from agentsite.core.errors import AppError
from agentsite.core.validation import validated
from organisation.models import GRANT_ROLES, VISIBILITIES, Group
from organisation.policy import EDIT, MANAGE, RESOURCES, ResourceKind, require

MAX_GRANTS = 200
TOPIC = "org.access"  # key: "<kind>:<id>", announced when a rule or an owner changes


class GrantSerializer(serializers.Serializer):
    group = serializers.IntegerField(required=False, min_value=1, help_text="A group's id (or `user`).")
    user = serializers.IntegerField(required=False, min_value=1, help_text="A user's id (or `group`).")
    role = serializers.ChoiceField(choices=GRANT_ROLES, help_text="viewer uses it; editor also changes it.")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("group" in attrs) == ("user" in attrs):
            raise serializers.ValidationError("Name exactly one of group and user.")
        return attrs


class GrantOutSerializer(GrantSerializer):
    name = serializers.CharField(help_text="The group's name or the user's username.")


class AccessSerializer(serializers.Serializer):
    visibility = serializers.ChoiceField(
        choices=VISIBILITIES, help_text="private: the owner and admins; everyone: every signed-in user may use it "
                                        "(grants add editors); shared: the grants alone.")
    grants = GrantSerializer(many=True, required=False, default=list)


class AccessOutSerializer(serializers.Serializer):
    visibility = serializers.ChoiceField(choices=VISIBILITIES)
    grants = GrantOutSerializer(many=True)


class TransferSerializer(serializers.Serializer):
    user = serializers.IntegerField(min_value=1, help_text="The id of the active user who becomes the owner.")


class TransferOutSerializer(serializers.Serializer):
    owner = serializers.DictField(help_text="{id, username} of the new owner.")


def rule_of(resource: Any) -> dict[str, Any]:
    """The resource's access rule as the API shows it (grants by groups first, then users, each by name)."""
    grants = []
    for grant in resource.grants.select_related("user", "group"):
        if grant.group_id:
            grants.append({"group": grant.group_id, "name": grant.group.name, "role": grant.role})
        else:
            grants.append({"user": grant.user_id, "name": grant.user.get_username(), "role": grant.role})
    grants.sort(key=lambda grant: ("group" not in grant, grant["name"]))
    return {"visibility": resource.visibility, "grants": grants}


def _checked_grants(kind: ResourceKind, resource: Any, grants: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if len(grants) > MAX_GRANTS:
        raise AppError("invalid", f"At most {MAX_GRANTS} grants.", 400, {"grants": [f"At most {MAX_GRANTS}."]})
    group_ids = {grant["group"] for grant in grants if "group" in grant}
    user_ids = {grant["user"] for grant in grants if "user" in grant}
    groups = set(Group.objects.filter(pk__in=group_ids).values_list("pk", flat=True))
    users = set(get_user_model().objects.filter(pk__in=user_ids, is_active=True).values_list("pk", flat=True))
    problems: dict[str, list[str]] = {}
    seen: set[tuple[str, int]] = set()
    for index, grant in enumerate(grants):
        who = ("group", grant["group"]) if "group" in grant else ("user", grant["user"])
        where = f"grants.{index}.{who[0]}"
        if who in seen:
            problems[where] = [f"{who[0]} {who[1]} is granted twice; keep one grant."]
        elif who[0] == "group" and who[1] not in groups:
            problems[where] = [f"No group with id {who[1]}."]
        elif who[0] == "user" and who[1] not in users:
            problems[where] = [f"No active user with id {who[1]}."]
        elif who[0] == "user" and who[1] == getattr(resource, "owner_id", None):
            problems[where] = ["That user owns it already."]
        elif grant["role"] not in kind.roles:
            problems[f"grants.{index}.role"] = [
                f"A {kind.label} may be granted as {' or '.join(kind.roles)} only."]
        seen.add(who)
    if problems:
        raise AppError("invalid", "Fix the grants: " + "; ".join(f"{key}: {text[0]}" for key, text in problems.items()),
                       400, problems)
    return grants


def access_set(*, kind: ResourceKind, resource: Any, visibility: str, grants: list[dict[str, Any]],
               request: Any = None) -> dict[str, Any]:
    """Replace the resource's access rule (the caller was checked for `manage`); audited with before and after."""
    grants = _checked_grants(kind, resource, grants)
    if kind.check_rule is not None:
        kind.check_rule(resource, visibility, grants)
    before = rule_of(resource)
    grant_model = kind.grant_model()
    with transaction.atomic():
        resource.visibility = visibility
        resource.save(update_fields=["visibility"])
        grant_model._default_manager.filter(resource=resource).delete()
        grant_model._default_manager.bulk_create([
            grant_model(resource=resource, user_id=grant.get("user"), group_id=grant.get("group"), role=grant["role"])
            for grant in grants])
    after = rule_of(resource)
    invalidation.announce(TOPIC, f"{kind.kind}:{resource.pk}")
    audit("access.change", request=request, target=f"{kind.kind}:{resource.pk}",
          details={"before": before, "after": after})
    return after


def transfer(*, kind: ResourceKind, resource: Any, to_user_id: int, request: Any = None, actor: Any = None) -> Any:
    """Hand the resource to another active user (the caller was checked for `manage`); audited."""
    new_owner = get_user_model().objects.filter(pk=to_user_id, is_active=True).first()
    if new_owner is None:
        raise AppError("invalid", f"No active user with id {to_user_id}.", 400, {"user": ["No such active user."]})
    before = resource.owner_id
    if before == new_owner.pk:
        return new_owner
    with transaction.atomic():
        if kind.transfer is not None:
            kind.transfer(resource, new_owner)
        else:
            resource.owner = new_owner
            resource.save(update_fields=["owner"])
        # The new owner's own grant would only repeat what owning gives.
        kind.grant_model()._default_manager.filter(resource=resource, user_id=new_owner.pk).delete()
    invalidation.announce(TOPIC, f"{kind.kind}:{resource.pk}")
    audit("resource.transfer", request=request, actor=actor, target=f"{kind.kind}:{resource.pk}",
          details={"before": {"owner": before}, "after": {"owner": new_owner.pk}})
    return new_owner


def _resource(kind: ResourceKind, pk: Any) -> Any:
    """The object the path names, by the kind's `lookup` field (its primary key unless the kind says otherwise).
    A NUL names nothing (no name holds one, and PostgreSQL refuses one in a query)."""
    named = pk not in ("", None) and not (isinstance(pk, str) and "\x00" in pk)
    try:
        resource = kind.model._default_manager.filter(**{kind.lookup: pk}).first() if named else None
    except (ValueError, TypeError, OverflowError, ValidationError):  # not an id of this kind (a word, 2**70)
        resource = None
    if resource is None:
        raise AppError("not_found", f"No {kind.label} with that id.", 404)
    return resource


TOO_LOW = OpenApiResponse(description="`forbidden`: the caller holds a role on the resource, too low for this "
                                      "(reading the rule needs editor; changing it or handing over, the owner).")


class AccessView(APIView):
    """GET/PUT <resource>/:id/access for the kind named by `kind`."""

    kind = ""

    @extend_schema(responses={200: AccessOutSerializer, 403: TOO_LOW})
    def get(self, request: Request, pk: Any) -> Response:
        kind = RESOURCES[self.kind]
        resource = _resource(kind, pk)
        require(request.user, EDIT, resource)
        return Response(rule_of(resource))

    @extend_schema(request=AccessSerializer, responses={200: AccessOutSerializer, 403: TOO_LOW})
    def put(self, request: Request, pk: Any) -> Response:
        kind = RESOURCES[self.kind]
        resource = _resource(kind, pk)
        require(request.user, MANAGE, resource)
        data = validated(AccessSerializer, request.data)
        grants = [dict(grant) for grant in data["grants"]]
        return Response(access_set(kind=kind, resource=resource, visibility=data["visibility"], grants=grants,
                                   request=request))


class TransferView(APIView):
    """POST <resource>/:id/transfer {user}: the owner (or an admin) hands the resource over."""

    kind = ""

    @extend_schema(request=TransferSerializer, responses={200: TransferOutSerializer, 403: TOO_LOW})
    def post(self, request: Request, pk: Any) -> Response:
        kind = RESOURCES[self.kind]
        resource = _resource(kind, pk)
        require(request.user, MANAGE, resource)
        data = validated(TransferSerializer, request.data)
        owner = transfer(kind=kind, resource=resource, to_user_id=data["user"], request=request)
        return Response({"owner": {"id": owner.pk, "username": owner.get_username()}})


def access_urls(prefix: str, kind: str, converter: str = "id", *, transferable: bool = True) -> list[URLPattern]:
    """The access (and transfer) routes of a kind: `<prefix>/<converter:pk>/access` and `.../transfer`, where the
    path's `pk` is matched against the kind's `lookup` field."""
    access = type(f"{kind.title().replace('_', '')}AccessView", (AccessView,), {"kind": kind})
    routes = [path(f"{prefix}/<{converter}:pk>/access", access.as_view(), name=f"{kind}-access")]
    if transferable:
        moving = type(f"{kind.title().replace('_', '')}TransferView", (TransferView,), {"kind": kind})
        routes.append(path(f"{prefix}/<{converter}:pk>/transfer", moving.as_view(), name=f"{kind}-transfer"))
    return routes

"""Changes to the organisation: groups and memberships, each audited with the before and after (every process's
membership cache hears of them from organisation.apps, on save and delete); and a user's belongings, listed and
handed over when the user goes."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Q

from agentsite.core.audit import audit
from agentsite.core.errors import AppError
from organisation.access import transfer
from organisation.models import GROUP_NAME_PATTERN, MEMBER, OIDC, Group, Membership
from organisation.policy import RESOURCES

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

GROUP_FIELDS = ("name", "description", "allowed_models", "source")


def _group_state(group: Group) -> dict[str, Any]:
    return {"name": group.name, "description": group.description, "models": group.allowed_models,
            "source": group.source}


def group_create(*, name: str, description: str = "", allowed_models: list[str] | None = None,
                 source: str = "manual", claim: str = "", request: Any = None) -> Group:
    try:
        with transaction.atomic():
            group = Group.objects.create(name=name, description=description, allowed_models=allowed_models,
                                         source=source, claim=claim)
    except IntegrityError as exc:
        raise AppError("conflict", f"A group named {name!r} exists.", 409, {"name": ["Taken."]}) from exc
    audit("group.create", request=request, target=f"group:{group.pk}", details={"after": _group_state(group)})
    return group


def group_update(*, group: Group, changes: dict[str, Any], request: Any = None) -> Group:
    before = _group_state(group)
    for name, value in changes.items():
        setattr(group, name, value)
    try:
        with transaction.atomic():
            group.save(update_fields=list(changes))
    except IntegrityError as exc:
        raise AppError("conflict", f"A group named {group.name!r} exists.", 409, {"name": ["Taken."]}) from exc
    audit("group.update", request=request, target=f"group:{group.pk}",
          details={"before": before, "after": _group_state(group)})
    return group


def group_delete(*, group: Group, request: Any = None) -> None:
    before = _group_state(group)
    members = list(Membership.objects.filter(group=group).values_list("user_id", flat=True))
    group_id = group.pk
    group.delete()
    audit("group.delete", request=request, target=f"group:{group_id}",
          details={"before": {**before, "members": members}})


def member_add(*, group: Group, user_id: int, role: str = MEMBER, request: Any = None) -> Membership:
    user = get_user_model().objects.filter(pk=user_id).first()
    if user is None:
        raise AppError("invalid", f"No user with id {user_id}.", 400, {"user": ["No such user."]})
    try:
        with transaction.atomic():
            membership = Membership.objects.create(group=group, user=user, role=role)
    except IntegrityError as exc:
        raise AppError("conflict", f"{user.get_username()} is a member already; PATCH the role instead.", 409,
                       {"user": ["A member already."]}) from exc
    audit("group.member_add", request=request, target=f"group:{group.pk}",
          details={"user": user.pk, "before": None, "after": {"role": role}})
    return membership


def _membership(group: Group, user_id: str) -> Membership:
    membership = (Membership.objects.filter(group=group, user_id=user_id).select_related("user").first()
                  if user_id else None)
    if membership is None:
        raise AppError("not_found", "That user is not a member of this group.", 404)
    return membership


def member_update(*, group: Group, user_id: str, role: str, request: Any = None) -> Membership:
    membership = _membership(group, user_id)
    before = membership.role
    membership.role = role
    membership.save(update_fields=["role"])
    audit("group.member_update", request=request, target=f"group:{group.pk}",
          details={"user": membership.user_id, "before": {"role": before}, "after": {"role": role}})
    return membership


def member_remove(*, group: Group, user_id: str, request: Any = None) -> None:
    membership = _membership(group, user_id)
    before = membership.role
    membership.delete()
    audit("group.member_remove", request=request, target=f"group:{group.pk}",
          details={"user": membership.user_id, "before": {"role": before}, "after": None})


def owned_by(user: AbstractBaseUser) -> dict[str, list[dict[str, Any]]]:
    """What the user owns, by kind (each object's id and name): what must be handed over before they go."""
    owned: dict[str, list[dict[str, Any]]] = {}
    for kind in RESOURCES.values():
        rows = kind.model._default_manager.filter(owner_id=user.pk).values("pk", kind.name_field)
        items = [{"id": str(row["pk"]), "name": row[kind.name_field]} for row in rows]
        if items:
            owned[kind.kind] = items
    return owned


def transfer_all(*, user: AbstractBaseUser, to_user: AbstractBaseUser, request: Any = None) -> dict[str, int]:
    """Hand everything the user owns to `to_user`, in one transaction (a conflict, such as a workflow name
    the new owner uses already, refuses it all: 409 naming it). Returns the count moved per kind."""
    moved: dict[str, int] = {}
    with transaction.atomic():
        for kind in RESOURCES.values():
            for resource in kind.model._default_manager.filter(owner_id=user.pk):
                transfer(kind=kind, resource=resource, to_user_id=to_user.pk, request=request)
                moved[kind.kind] = moved.get(kind.kind, 0) + 1
    return moved


def claim_group_name(value: str) -> str | None:
    """The name a group made for a value of the identity provider's groups claim gets: a leading `/` (Keycloak's
    group paths) dropped, each character outside letters, digits, `-` and `_` made `_`, cut to 64; None when
    nothing is left. Two values may give one name: the group keeps the value it was made for (`Group.claim`)."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", value.strip().lstrip("/"))[:64]
    return name if re.fullmatch(GROUP_NAME_PATTERN, name) else None


def memberships_sync(*, user: AbstractBaseUser, names: list[str], create: bool, request: Any = None
                     ) -> dict[str, list[str]]:
    """Make the user's memberships in `source: oidc` groups exactly the groups the claim values `names` stand for;
    groups made by hand are never touched. A value stands for the oidc group made for it (`claim`), or else the
    oidc group whose name it is exactly (one an admin adopted). A value with neither makes a group when `create`
    (named by claim_group_name) unless that name is taken: two provider groups never share one group here. Each
    membership added or removed is audited. Returns the group names {"added": [...], "removed": [...]}."""
    values = sorted({value.strip() for value in names if value.strip() and len(value.strip()) <= 255})
    with transaction.atomic():
        found = list(Group.objects.filter(source=OIDC).filter(Q(claim__in=values) | Q(claim="", name__in=values)))
        by_value = {group.claim: group for group in found if group.claim}
        for group in found:
            if not group.claim:
                by_value.setdefault(group.name, group)
        if create:
            for value in values:
                name = claim_group_name(value) if value not in by_value else None
                group = _oidc_group_create(name, value, request) if name else None
                if group is not None:
                    by_value[value] = group
        groups = {group.name: group for group in by_value.values()}
        current = {membership.group.name: membership for membership in
                   Membership.objects.filter(user=user, group__source=OIDC).select_related("group")}
        added = [name for name in sorted(groups) if name not in current]
        removed = [name for name in sorted(current) if name not in groups]
        for name in added:
            Membership.objects.create(group=groups[name], user=user, role=MEMBER)
            audit("group.member_add", request=request, actor=user, target=f"group:{groups[name].pk}",
                  details={"user": user.pk, "before": None, "after": {"role": MEMBER}, "by": "oidc"})
        for name in removed:
            membership = current[name]
            membership.delete()
            audit("group.member_remove", request=request, actor=user, target=f"group:{membership.group_id}",
                  details={"user": user.pk, "before": {"role": membership.role}, "after": None, "by": "oidc"})
    return {"added": added, "removed": removed}


def _oidc_group_create(name: str, value: str, request: Any) -> Group | None:
    """A new `oidc` group for the claim value `value`; when the name is taken, the group another sign-in made for
    the same value meanwhile (both saw it missing), else None: a manual group, or one made for another value
    whose name is the same, is never joined."""
    try:
        return group_create(name=name, source=OIDC, claim=value, request=request,
                            description="Made at sign-in from the identity provider's groups.")
    except AppError:
        return Group.objects.filter(name=name, source=OIDC, claim=value).first()

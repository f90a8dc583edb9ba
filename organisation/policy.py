"""Who may do what to a shareable resource: the one decision, `can(user, action, resource)`.

Roles, least to most: a `viewer` uses it (searches a collection, runs a workflow, chats with an agent, calls an MCP
server's tools); an `editor` also changes it; the `owner` and every active admin also delete, share and hand it
over. Under visibility `everyone` every signed-in user is at least a viewer; under `everyone` and `shared` a grant
to the user or to one of their groups gives its role (the highest wins); under `private` nobody else holds one; an
inactive or anonymous user never does (though what a deactivated owner's agent reads for its grantees is still the
owner's rights as a user: `owner_reads_q`). A kind registers (`register`) its model and the roles a grant may give
(an MCP server: `viewer` only, since changing one spawns processes). `require` refuses: no role is 404 (as a
missing object), too low a role is 403 `forbidden`. Listings filter with `visible_q`, one subquery. One object
costs no query for an owner, an admin or `everyone`, one indexed query otherwise; nothing is cached, so a change
counts from the next request in every process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import models
from django.db.models import Q

from agentsite.core.errors import AppError
from organisation.models import EDITOR, EVERYONE, GRANT_ROLES, PRIVATE, SHARED, VIEWER

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

OWNER = "owner"
USE, EDIT, MANAGE = "use", "edit", "manage"
ACTIONS = (USE, EDIT, MANAGE)
_RANK = {VIEWER: 1, EDITOR: 2, OWNER: 3}
_NEEDS = {USE: VIEWER, EDIT: EDITOR, MANAGE: OWNER}


@dataclass(frozen=True)
class ResourceKind:
    """A kind of shareable resource, as its app registers it."""

    kind: str                      # the name in paths, audit targets and the ownership listing: "collection"
    model: type[models.Model]      # a Shareable with `owner` and a related `grants` manager
    label: str                     # "knowledge collection": what an error names
    roles: tuple[str, ...] = GRANT_ROLES
    name_field: str = "name"       # what the ownership listing shows of each object
    lookup: str = "pk"             # the field the access routes' path names an object by (an MCP server: "name")
    # Hands one object over (default: sets `owner`, saves); raises AppError 409 when it cannot (a name taken).
    transfer: Callable[[Any, Any], None] | None = None
    # Checks a new rule (resource, visibility, grants) before it is stored; raises AppError when the object cannot
    # take it (the agent `default` stays everyone's).
    check_rule: Callable[[Any, str, list[dict[str, Any]]], None] | None = None

    def grant_model(self) -> type[models.Model]:
        return self.model._meta.get_field("grants").related_model  # type: ignore[return-value]


RESOURCES: dict[str, ResourceKind] = {}


def register(kind: ResourceKind) -> None:
    """An app's ready(): its shareable model joins the policy (and the access and transfer endpoints)."""
    RESOURCES[kind.kind] = kind


def kind_of(resource: models.Model) -> ResourceKind:
    for kind in RESOURCES.values():
        if isinstance(resource, kind.model):
            return kind
    raise LookupError(f"{type(resource).__name__} is not a registered shareable resource")


def _signed_in(user: AbstractBaseUser) -> bool:
    return bool(user is not None and getattr(user, "is_authenticated", False) and getattr(user, "is_active", False))


def role_of(user: AbstractBaseUser, resource: models.Model) -> str | None:
    """The user's role on the resource: `owner`, `editor`, `viewer`, or None (see the module docstring)."""
    if not _signed_in(user):
        return None
    owner_id, visibility = resource.owner_id, resource.visibility  # type: ignore[attr-defined]
    if user.is_staff or (owner_id is not None and owner_id == user.pk) or visibility == PRIVATE:
        return role_by_rule(user, owner_id, visibility, ())
    granted = resource.grants.filter(  # type: ignore[attr-defined]
        Q(user_id=user.pk) | Q(group__memberships__user_id=user.pk)).values_list("role", flat=True)
    return role_by_rule(user, owner_id, visibility, granted)


def role_by_rule(user: AbstractBaseUser, owner_id: int | None, visibility: str, granted: Iterable[str]) -> str | None:
    """role_of with the roles of the grants that name the user or one of their groups already read (a caller
    that keeps a rule in memory, such as the agents' directory, asks this with the grants it holds)."""
    if not _signed_in(user):
        return None
    if user.is_staff or (owner_id is not None and owner_id == user.pk):
        return OWNER
    if visibility == PRIVATE:
        return None
    best = VIEWER if visibility == EVERYONE else None
    for role in granted:
        if best is None or _RANK.get(role, 0) > _RANK[best]:
            best = role
    return best


def allows(role: str | None, action: str) -> bool:
    """Whether a role (role_of's answer) is enough for the action."""
    return role is not None and _RANK[role] >= _RANK[_NEEDS[action]]


def can(user: AbstractBaseUser, action: str, resource: models.Model) -> bool:
    """Whether `user` may `use`, `edit` or `manage` (delete, share, hand over) `resource`."""
    if action == USE and resource.visibility == EVERYONE and _signed_in(user):  # type: ignore[attr-defined]
        return True  # enough without asking which grants raise the role further
    return allows(role_of(user, resource), action)


def require(user: AbstractBaseUser, action: str, resource: models.Model) -> str:
    """The caller's role on the resource, or an AppError: 404 when it holds none, 403 `forbidden` when too low."""
    kind = kind_of(resource)
    role = role_of(user, resource)
    if role is None:
        raise AppError("not_found", f"No {kind.label} with that id.", 404)
    if _RANK[role] < _RANK[_NEEDS[action]]:
        verb = {EDIT: "change", MANAGE: "delete, share or hand over"}[action]
        raise AppError("forbidden", f"You may use this {kind.label} ({role}) but not {verb} it; ask its owner.", 403)
    return role


def visible_q(user: AbstractBaseUser, model: type[models.Model], *, every_object_for_admins: bool = False) -> Q:
    """A filter for the objects of `model` the user holds a role on (one subquery for the grants). Admins see
    what they own or is shared with them, like anyone, unless `every_object_for_admins` (they may act on any
    object by its id)."""
    if not _signed_in(user):
        return Q(pk__in=[])
    if every_object_for_admins and user.is_staff:
        return Q()
    return _held_q(user.pk, model)


def owner_reads_q(owner_id: int, model: type[models.Model]) -> Q:
    """A filter for the objects of `model` that a resource of user `owner_id` (an agent) reads for whoever uses
    it: what the owner holds a role on as a user (visible_q; an admin counts as anyone), whether or not they are
    active now. Deactivating an owner keeps their shared things working for the grantees, while the owner
    themself holds no role on anything (role_of, visible_q) and cannot sign in."""
    return _held_q(owner_id, model)


def _held_q(user_id: int, model: type[models.Model]) -> Q:
    grants = model._meta.get_field("grants").related_model._default_manager.filter(  # type: ignore[union-attr]
        Q(user_id=user_id) | Q(group__memberships__user_id=user_id)).values("resource_id")
    return (Q(owner_id=user_id) | Q(visibility=EVERYONE)
            | Q(visibility__in=[EVERYONE, SHARED], pk__in=grants))

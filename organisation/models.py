"""Groups, memberships, and the two halves of a resource's access rule: the resource's own `visibility` column
(`Shareable`) and its grants (a concrete `GrantBase` per resource kind, beside the resource in its own app).

Invariants:
- a group's name is unique and 1-64 letters, digits, `-` or `_`; a user is a member of a group at most once;
- a grant names exactly one of a user and a group, and a resource holds at most one grant per user and per group;
- a resource's visibility decides whose grants count: `private`, none (the owner and admins only); `everyone`,
  every signed-in user is a viewer and the grants add editors; `shared`, the grants alone.
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

GROUP_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
group_name_validator = RegexValidator(GROUP_NAME_PATTERN, "Use 1-64 letters, digits, '-' or '_'.")

PRIVATE, EVERYONE, SHARED = "private", "everyone", "shared"
VISIBILITIES = (PRIVATE, EVERYONE, SHARED)
VIEWER, EDITOR = "viewer", "editor"
GRANT_ROLES = (VIEWER, EDITOR)
MEMBER, MANAGER = "member", "manager"
MEMBER_ROLES = (MEMBER, MANAGER)
MANUAL, OIDC = "manual", "oidc"
GROUP_SOURCES = (MANUAL, OIDC)


class Group(models.Model):
    """A named set of users: what resources are shared with, what model access and a team budget attach to."""

    name = models.CharField(max_length=64, unique=True, validators=[group_name_validator])
    description = models.TextField(blank=True, default="")
    # Not `models`: a class attribute of that name would hide the module in the lines below it.
    allowed_models = models.JSONField(
        null=True, blank=True, default=None,
        help_text="The models the members may use (aliases, connection/model, workflow:*, agent:* patterns); null: "
                  "no restriction. A user in any restricting group may use the union of their groups' lists.")
    source = models.CharField(
        max_length=10, default=MANUAL,
        help_text="manual: members are managed here; oidc: each sign-in through the identity provider replaces the "
                  "user's membership by its groups claim (sso.accounts).")
    claim = models.CharField(
        max_length=255, blank=True, default="",
        help_text="For an oidc group made at sign-in: the groups claim's value it stands for (its name is that value "
                  "made a group name, which two values may share: only this value joins it). Empty: the group's "
                  "name is the value.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "user group"  # Django's own auth app has "Groups" (permissions), unused here

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    """A user in a group, as a `member` or a `manager` (who manages the group's members)."""

    group = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="group_memberships")
    role = models.CharField(max_length=10, default=MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["group_id", "user_id"]
        constraints = [models.UniqueConstraint(fields=["group", "user"], name="org_membership_group_user")]
        indexes = [models.Index(fields=["user", "group"], name="org_membership_user")]

    def __str__(self) -> str:
        return f"{self.user_id} in {self.group_id} ({self.role})"


class Shareable(models.Model):
    """A resource with an access rule. The concrete model has an `owner` (a user; null for what the deployment
    owns, such as an admin's MCP server) and a `GrantBase` subclass with `resource = ForeignKey(<it>,
    related_name="grants")`; it registers itself with `organisation.policy.register`."""

    visibility = models.CharField(max_length=10, default=PRIVATE)

    class Meta:
        abstract = True


class GrantBase(models.Model):
    """One grant of a resource's access rule: a user or a group, as a viewer or an editor."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                             related_name="%(app_label)s_%(class)s_set")
    group = models.ForeignKey(Group, null=True, blank=True, on_delete=models.CASCADE,
                              related_name="%(app_label)s_%(class)s_set")
    role = models.CharField(max_length=10, default=VIEWER)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        who = f"user {self.user_id}" if self.user_id else f"group {self.group_id}"
        return f"{who}: {self.role}"

    @staticmethod
    def grant_constraints(prefix: str) -> list[models.BaseConstraint]:
        """The constraints every concrete grant model declares (its Meta names them with its own prefix)."""
        return [
            models.CheckConstraint(
                condition=(models.Q(user__isnull=False, group__isnull=True)
                           | models.Q(user__isnull=True, group__isnull=False)),
                name=f"{prefix}_grant_one_grantee"),
            models.UniqueConstraint(fields=["resource", "user"], name=f"{prefix}_grant_user"),
            models.UniqueConstraint(fields=["resource", "group"], name=f"{prefix}_grant_group"),
        ]

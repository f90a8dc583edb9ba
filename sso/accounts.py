"""Who a verified sign-in is here: the account linked to the provider's subject (made, or linked by a verified
e-mail, at the first sign-in), kept current from the claims at each sign-in (e-mail, name, the `oidc` groups,
admin), and refused when the settings say so.

Contract: `sign_in(issuer, claims, request)` returns an active user or raises SsoFailure, in one transaction: a
refused sign-in changes nothing. The link is issuer + `sub`, never a username or an e-mail, except that with
LINK_BY_EMAIL an existing account whose e-mail equals a *verified* `email` claim is linked (once: the link then
holds whatever the e-mail becomes; a deactivated one is refused, never replaced by a new account).
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from organisation.services import memberships_sync
from sso.models import Identity
from sso.provider import SsoFailure

User = get_user_model()
USERNAME_MAX = 150


def claim_at(claims: dict[str, Any], path: str) -> Any:
    """The claim at a dotted path (`realm_access.roles`); a claim whose own name has dots (`https://x/groups`)
    is found whole first. None when absent."""
    if path in claims:
        return claims[path]
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def group_values(claims: dict[str, Any]) -> list[str]:
    """The groups claim (OIDC GROUPS_CLAIM) as a list of strings: a list keeps its strings, a single string is a
    list of one, anything else (absent included) is no groups."""
    value = claim_at(claims, settings.OIDC["GROUPS_CLAIM"]) if settings.OIDC["GROUPS_CLAIM"] else None
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, list):
        return [item.strip() for item in value if isinstance(item, str) and item.strip()]
    return []


def _verified(claims: dict[str, Any]) -> bool:
    verified = claims.get("email_verified")
    return verified is True or (isinstance(verified, str) and verified.strip().lower() == "true")


def _text(claims: dict[str, Any], name: str, limit: int) -> str:
    value = claims.get(name)
    return value.strip()[:limit] if isinstance(value, str) else ""


def _username_base(claims: dict[str, Any]) -> str:
    for candidate in (_text(claims, "preferred_username", 500), _text(claims, "email", 500).split("@")[0],
                      _text(claims, "nickname", 500)):
        # NFKC first, as registration's create_user does (normalize_username): `ａdmin` is `admin`, and is made
        # unique against it, never a second account that reads the same.
        base = re.sub(r"[^\w.@+-]", "_", User.normalize_username(candidate))[:USERNAME_MAX - 8].strip("_")
        if base:
            return base
    return "user"


def unique_username(base: str) -> str:
    """base, or base-2, base-3, ... : the first no user has (names are compared without case, as registration
    does)."""
    name, number = base, 1
    while User.objects.filter(username__iexact=name).exists():
        number += 1
        name = f"{base}-{number}"
    return name


def _linked_by_email(claims: dict[str, Any], issuer: str) -> Any:
    """The account a verified e-mail links (LINK_BY_EMAIL), or None. Accounts already linked to a subject of this
    issuer are not candidates. Several candidates: account_conflict. A deactivated one is a candidate, refused
    by sign_in as any deactivated user is: passing it over for a new account would let its owner back in."""
    email = _text(claims, "email", 254)
    if not settings.OIDC["LINK_BY_EMAIL"] or not email or not _verified(claims):
        return None
    candidates = list(User.objects.filter(email__iexact=email).exclude(sso_identities__issuer=issuer)
                      .order_by("pk")[:2])
    if len(candidates) > 1:
        raise SsoFailure("account_conflict", "Several accounts here have your e-mail address; ask an administrator "
                         "to link yours.", 409)
    return candidates[0] if candidates else None


def _profile(user: AbstractBaseUser, claims: dict[str, Any]) -> list[str]:
    """Set the e-mail and the name from the claims; returns the fields changed."""
    given, family = _text(claims, "given_name", 150), _text(claims, "family_name", 150)
    if not (given or family):
        given = _text(claims, "name", 150)
    wanted = {"email": _text(claims, "email", 254), "first_name": given, "last_name": family}
    changed = [name for name, value in wanted.items() if value and getattr(user, name) != value]
    for name in changed:
        setattr(user, name, wanted[name])
    return changed


def allowed_check(groups: list[str]) -> None:
    allowed = settings.OIDC["ALLOWED_GROUPS"]
    if allowed and not set(groups) & set(allowed):
        raise SsoFailure("not_allowed", f"Only members of {', '.join(allowed)} may sign in here (the provider's "
                         f"{settings.OIDC['GROUPS_CLAIM']!r} claim names none of them); ask your administrator.", 403)


def sign_in(*, issuer: str, claims: dict[str, Any], request: Any = None) -> tuple[Any, dict[str, Any]]:
    """The user of a verified sign-in, made current; returns (user, what changed: {"created", "linked",
    "groups": {"added", "removed"}, "admin"}). Raises SsoFailure (nothing changed) when refused."""
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise SsoFailure("missing_claim", "The ID token has no subject (sub).")
    groups = group_values(claims)
    allowed_check(groups)
    try:
        with transaction.atomic():
            return _sign_in(issuer, subject, claims, groups, request)
    except IntegrityError:
        # Two first sign-ins of one subject at once: the other made the link; this one now finds it.
        with transaction.atomic():
            return _sign_in(issuer, subject, claims, groups, request)


def _sign_in(issuer: str, subject: str, claims: dict[str, Any], groups: list[str], request: Any
             ) -> tuple[Any, dict[str, Any]]:
    changes: dict[str, Any] = {"created": False, "linked": False}
    identity = Identity.objects.select_related("user").filter(issuer=issuer, subject=subject).first()
    if identity is not None:
        user = identity.user
    else:
        user = _linked_by_email(claims, issuer)
        changes["linked"] = user is not None
        if user is None:
            if not settings.OIDC["CREATE_USERS"]:
                raise SsoFailure("no_account", "Ask an administrator to create your account first.", 403)
            user = User(username=unique_username(_username_base(claims)))
            user.set_unusable_password()
            user.save()
            changes["created"] = True
        identity = Identity.objects.create(user=user, issuer=issuer, subject=subject)
    if not user.is_active:
        raise SsoFailure("deactivated", "Ask an administrator to reactivate it.", 403)
    fields = _profile(user, claims)
    admin_groups = settings.OIDC["ADMIN_GROUPS"]
    if admin_groups:
        admin = bool(set(groups) & set(admin_groups))
        if bool(user.is_staff) != admin or bool(user.is_superuser) != admin:
            user.is_staff = user.is_superuser = admin
            fields += ["is_staff", "is_superuser"]
            changes["admin"] = admin
    fields.append("last_login")
    user.last_login = timezone.now()
    user.save(update_fields=fields)
    identity.email, identity.last_login_at = _text(claims, "email", 254), timezone.now()
    identity.save(update_fields=["email", "last_login_at"])
    changes["groups"] = memberships_sync(user=user, names=groups, create=settings.OIDC["CREATE_GROUPS"],
                                         request=request)
    return user, changes

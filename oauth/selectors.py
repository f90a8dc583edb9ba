"""Reads of the oauth app: the connected apps of a user and their live tokens."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.db.models import Max, Min, QuerySet
from django.utils import timezone
from rest_framework.request import Request

from agentsite.core.errors import AppError
from oauth.models import AccessToken


def user_param(request: Request) -> int:
    """The user whose apps a request is about: the caller, or for an admin the `user` query parameter."""
    raw = request.query_params.get("user")
    if raw is None:
        return request.user.pk
    if not request.user.is_staff:
        raise AppError("forbidden", "Only admins may see another user's connected apps.", 403)
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        raise AppError("invalid", "user is a user id.", 400, {"user": ["A user id."]})
    return int(raw)


def live_tokens(user_id: int, client_id: str | None = None) -> QuerySet[AccessToken]:
    """The user's tokens that still count as a grant: unrevoked, and not yet past their refresh token's end."""
    tokens = AccessToken.objects.filter(user_id=user_id, revoked_at__isnull=True,
                                        refresh_expires_at__gt=timezone.now())
    return tokens.filter(client__client_id=client_id) if client_id is not None else tokens


def connected_apps(user_id: int) -> list[dict[str, Any]]:
    """One entry per client holding a live grant for the user, the most recently used first (one never used: by
    when it connected). A grant's rows are its refreshes: it connected when its first row was issued, and was
    last used when any of them was. An app may hold grants for both resources (/mcp, /a2a): `resources` lists
    them, oldest grant first; `scope` and `resource` are its oldest live grant's."""
    live = list(live_tokens(user_id).select_related("client", "user").order_by("issued_at"))
    families = AccessToken.objects.filter(family__in={token.family for token in live}).values("family").annotate(
        first=Min("issued_at"), last=Max("last_used_at"))
    history = {row["family"]: (row["first"], row["last"]) for row in families}
    apps: dict[int, dict[str, Any]] = {}
    for token in live:
        client, (first, last) = token.client, history[token.family]
        entry = apps.get(client.pk)
        if entry is None:
            redirect = client.redirect_uris[0] if client.redirect_uris else ""
            entry = apps[client.pk] = {
                "client_id": client.client_id, "name": client.name, "redirect_host": urlsplit(redirect).netloc,
                "scope": token.scope, "resource": token.resource, "resources": [],
                "user": {"id": token.user_id, "username": token.user.username},
                "connected_at": first, "last_used_at": last, "expires_at": token.refresh_expires_at}
        if token.resource not in entry["resources"]:
            entry["resources"].append(token.resource)
        entry["connected_at"] = min(entry["connected_at"], first)
        if last is not None and (entry["last_used_at"] is None or last > entry["last_used_at"]):
            entry["last_used_at"] = last
        entry["expires_at"] = max(entry["expires_at"], token.refresh_expires_at)
    return sorted(apps.values(), key=lambda app: (app["last_used_at"] or app["connected_at"], app["client_id"]),
                  reverse=True)

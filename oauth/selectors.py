"""Reads of the oauth app: the connected apps of a user and their live tokens."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.db.models import QuerySet
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
    """One entry per client holding a live grant for the user, most recently used first."""
    apps: dict[int, dict[str, Any]] = {}
    for token in live_tokens(user_id).select_related("client", "user").order_by("issued_at"):
        client = token.client
        entry = apps.get(client.pk)
        if entry is None:
            redirect = client.redirect_uris[0] if client.redirect_uris else ""
            entry = apps[client.pk] = {
                "client_id": client.client_id, "name": client.name, "redirect_host": urlsplit(redirect).netloc,
                "scope": token.scope, "resource": token.resource,
                "user": {"id": token.user_id, "username": token.user.username},
                "connected_at": token.issued_at, "last_used_at": None, "expires_at": token.refresh_expires_at}
        if token.last_used_at and (entry["last_used_at"] is None or token.last_used_at > entry["last_used_at"]):
            entry["last_used_at"] = token.last_used_at
        entry["expires_at"] = max(entry["expires_at"], token.refresh_expires_at)
    return sorted(apps.values(), key=lambda app: app["last_used_at"] or app["connected_at"], reverse=True)

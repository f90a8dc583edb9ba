"""Reads of accounts: API keys."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from accounts.models import ApiKey
from accounts.tokens import password_version
from agentsite.core.errors import AppError


def key_list_for(*, user, owner_id=None, everyone: bool = False):
    """The caller's keys, newest first; an admin's `owner_id` names another user's, `everyone` all keys."""
    keys = ApiKey.objects.select_related("user").order_by("-created_at", "-pk")
    if everyone:
        return keys
    return keys.filter(user_id=owner_id if owner_id is not None else user.pk)


def key_get_for(*, user, key_id):
    """The caller's key (an admin's: anyone's); another user's is a 404, as a missing one."""
    if not str(key_id).isdigit() or len(str(key_id)) > 18:  # the path takes any text: ids are integers
        raise AppError("not_found", "No API key with that id.", 404)
    keys = ApiKey.objects.select_related("user")
    if not (user.is_active and user.is_staff):
        keys = keys.filter(user_id=user.pk)
    key = keys.filter(pk=key_id).first()
    if key is None:
        raise AppError("not_found", "No API key with that id.", 404)
    return key


def key_for_work(*, key_id: int) -> Any:
    """The API key that made a trigger or a scheduled task, read now, if it still stands (not revoked, not
    expired, its user active and on the password it was made under): what runs for that work runs as it.
    Raises AppError 403 `forbidden` saying why not (sync: the database)."""

    key = ApiKey.objects.select_related("user").filter(pk=key_id).first()
    reason = None
    if key is None or key.revoked:
        reason = "was revoked"
    elif key.expires_at is not None and key.expires_at <= timezone.now():
        reason = "expired"
    elif not key.user.is_active:
        reason = "belongs to a deactivated user"
    elif key.password_version != password_version(key.user):
        reason = "was made before its user's password changed"
    if reason is not None:
        raise AppError("forbidden", f"The API key that made this (key {key_id}) {reason}: it no longer runs.", 403)
    return key

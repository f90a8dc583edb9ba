"""Who may call what, for the views of every app: DRF permission classes that read only the request's user."""

from __future__ import annotations

from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView


class IsAdmin(BasePermission):
    """Staff users: they may change the agent's config and start processes on the host."""

    message = "Only an administrator may do this."

    def has_permission(self, request: Request, view: APIView) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and getattr(user, "is_staff", False))

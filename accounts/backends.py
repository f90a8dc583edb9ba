"""The password backend: Django's own check, plus AGENTSITE_PASSWORD_LOGIN. With it off, only users flagged
`break_glass` (accounts.models.BreakGlass, `manage.py breakglass`) get past a password, on every password door at
once (POST /api/auth/login, the Django admin's form), so a broken identity provider cannot lock the operator out
and nobody else signs in around it.

The password is checked before the flag (ModelBackend.authenticate), so a wrong password costs the same hash
whoever tried it: the answer never tells a caller who is break-glass. Django's session (the admin site) asks the
backend again on each request (get_user), so turning passwords off also ends the admin sessions of everyone but
break-glass users; tokens and API keys do not come through here and keep working."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth.backends import ModelBackend

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser


def password_login_on() -> bool:
    return bool(settings.PASSWORD_LOGIN)


def is_break_glass(user: AbstractBaseUser) -> bool:
    from accounts.models import BreakGlass  # the backend module loads before the app registry

    return BreakGlass.objects.filter(user_id=user.pk).exists()


def may_use_password(user: AbstractBaseUser) -> bool:
    """Whether the user may sign in with a password now: always while password sign-in is on; otherwise only a
    break-glass user."""
    return password_login_on() or is_break_glass(user)


class PasswordBackend(ModelBackend):
    def user_can_authenticate(self, user: AbstractBaseUser) -> bool:  # type: ignore[override]
        return super().user_can_authenticate(user) and may_use_password(user)

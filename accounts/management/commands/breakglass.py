"""manage.py breakglass: flag the users who may still sign in with a password while AGENTSITE_PASSWORD_LOGIN=0.

Only this command (someone with a shell on the server) sets or clears the flag: the Django admin shows it read-only,
so that nobody signed in through the web can grant themselves a way round single sign-on."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.backends import password_login_on
from accounts.models import BreakGlass

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser


class Command(BaseCommand):
    help = ("Let a user sign in with a password while AGENTSITE_PASSWORD_LOGIN=0 (for when the identity provider is "
            "broken): `breakglass admin`, `breakglass admin --remove`, `breakglass --list`.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", nargs="?", help="The user to flag (or, with --remove, to unflag).")
        parser.add_argument("--remove", action="store_true", help="Take the flag away.")
        parser.add_argument("--list", action="store_true", help="List the flagged users.")

    def handle(self, *args: Any, username: str | None = None, remove: bool = False, list: bool = False,
               **options: Any) -> None:
        if list:
            if username or remove:
                raise CommandError("--list takes no user and no --remove.")
            self._list()
            return
        if not username:
            raise CommandError("Name a user (or give --list).")
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username!r} (`manage.py breakglass --list` lists the flagged ones; "
                               "usernames are case-sensitive).")
        if remove:
            deleted, _ = BreakGlass.objects.filter(user=user).delete()
            self.stdout.write(f"{username} may no longer sign in with a password while AGENTSITE_PASSWORD_LOGIN=0."
                              if deleted else f"{username} was not break-glass; nothing changed.")
            return
        _, made = BreakGlass.objects.get_or_create(user=user)
        self.stdout.write(f"{username} {'may' if made else 'was already allowed to'} sign in with a password while "
                          "AGENTSITE_PASSWORD_LOGIN=0.")
        for problem in _problems(user):
            self.stdout.write(f"But {username} {problem}.")
        if password_login_on():
            self.stdout.write("Password sign-in is on now (AGENTSITE_PASSWORD_LOGIN is not 0): the flag changes "
                              "nothing until it is turned off.")

    def _list(self) -> None:
        flags = BreakGlass.objects.select_related("user").order_by("user__username")
        for flag in flags:
            self.stdout.write(flag.user.get_username() + "".join(f" ({problem})" for problem in _problems(flag.user)))
        if not flags:
            self.stdout.write("No break-glass users.")


def _problems(user: AbstractBaseUser) -> list[str]:
    """What stops the user's password from signing them in all the same, and how to fix it."""
    problems = []
    if not user.has_usable_password():
        problems.append("has no usable password (an account made by single sign-on): set one with "
                        f"`manage.py changepassword {user.get_username()}`")
    if not user.is_active:
        problems.append("is deactivated, and a deactivated user signs in nowhere")
    return problems

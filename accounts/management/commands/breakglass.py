"""manage.py breakglass: flag the users who may still sign in with a password while AGENTSITE_PASSWORD_LOGIN=0."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import BreakGlass


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
            names = BreakGlass.objects.order_by("user__username").values_list("user__username", flat=True)
            for name in names:
                self.stdout.write(name)
            if not names:
                self.stdout.write("No break-glass users.")
            return
        if not username:
            raise CommandError("Name a user (or give --list).")
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username!r}.")
        if remove:
            deleted, _ = BreakGlass.objects.filter(user=user).delete()
            self.stdout.write(f"{username} may no longer sign in with a password while password sign-in is off."
                              if deleted else f"{username} was not flagged.")
            return
        BreakGlass.objects.get_or_create(user=user)
        note = "" if user.has_usable_password() else " They have no password yet: set one with `changepassword`."
        self.stdout.write(f"{username} may sign in with a password while AGENTSITE_PASSWORD_LOGIN=0.{note}")

"""manage.py initadmin: create the initial administrator once (serve runs it on each start; so can a deployment),
and say how the operator signs in when password sign-in is off (AGENTSITE_PASSWORD_LOGIN=0)."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand

from accounts.backends import password_login_on
from accounts.models import BreakGlass
from accounts.services import admin_bootstrap


class Command(BaseCommand):
    help = ("Create the initial administrator (break-glass) with a random password, unless one exists; warn when "
            "password sign-in is off and nobody could sign in should single sign-on fail.")

    def handle(self, *args, **options) -> None:
        created = admin_bootstrap()
        if created is None:
            self.stdout.write("agentsite: an administrator exists; no initial admin created.")
        else:
            self._created(*created)
        if not password_login_on():
            self._password_login_off()

    def _created(self, username: str, password: str) -> None:
        self.stdout.write(self.style.WARNING(
            "agentsite: created the initial administrator (shown once; also in "
            f"{settings.DATA_DIR / 'initial_admin.txt'}, mode 0600):\n"
            f"    username: {username}\n    password: {password}\n"
            "Log in on the dashboard at / (or /admin/, or POST /api/auth/login), then change the password.\n"
            f"It is break-glass: its password signs it in even while AGENTSITE_PASSWORD_LOGIN=0, when nobody else's "
            f"does (`manage.py breakglass {username} --remove` takes that away)."))

    def _password_login_off(self) -> None:
        self.stdout.write("agentsite: password sign-in is off (AGENTSITE_PASSWORD_LOGIN=0): only break-glass users "
                          "(`manage.py breakglass --list`) sign in with a password.")
        if not (settings.OIDC["ISSUER"] and settings.OIDC["CLIENT_ID"]):
            self.stderr.write(self.style.WARNING(
                "agentsite: no single sign-on is set up (AGENTSITE_OIDC_ISSUER, AGENTSITE_OIDC_CLIENT_ID): nobody "
                "but break-glass users can sign in."))
        usable = [flag.user for flag in BreakGlass.objects.select_related("user").filter(user__is_active=True)
                  if flag.user.has_usable_password()]
        if not usable:
            self.stderr.write(self.style.WARNING(
                "agentsite: no active break-glass user has a password: should single sign-on fail, nobody can sign "
                "in. Flag one: `manage.py breakglass <username>`."))

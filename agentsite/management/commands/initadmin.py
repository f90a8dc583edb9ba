"""manage.py initadmin: create the initial administrator once (serve runs it; so can a deployment)."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand

from accounts.services import admin_bootstrap


class Command(BaseCommand):
    help = "Create the initial administrator with a random password, unless one exists."

    def handle(self, *args, **options) -> None:
        created = admin_bootstrap()
        if created is None:
            self.stdout.write("agentsite: an administrator exists; no initial admin created.")
            return
        username, password = created
        self.stdout.write(self.style.WARNING(
            "agentsite: created the initial administrator (shown once; also in "
            f"{settings.DATA_DIR / 'initial_admin.txt'}, mode 0600):\n"
            f"    username: {username}\n    password: {password}\n"
            "Log in on the dashboard at / (or /admin/, or POST /api/auth/login), then change the password."))

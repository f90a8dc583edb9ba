"""Single sign-on's rows: who a provider's subject is here, the sign-ins under way, and the hand-over to the page.

Invariants:
- an `Identity` links one (issuer, subject) to one user, for good: a later sign-in of the subject is that user,
  whatever its username or e-mail says then; a user may have identities at several issuers;
- a `LoginAttempt` is made by GET /api/auth/oidc/login and used at most once, by the callback whose browser holds
  the cookie it was bound to (`browser` is the SHA-256 of that cookie, `state` the SHA-256 of the state), within
  LOGIN_TTL; the callback deletes it before anything else, so a replayed state finds nothing;
- a `Ticket` carries a finished sign-in from the callback to the dashboard (POST /api/auth/oidc/session) through
  an HttpOnly cookie, once, within TICKET_TTL; tokens never travel in a URL;
- an `SsoSession` keeps the ID token a sign-in received (for the provider's sign-out, `id_token_hint`), named by
  the random `key` the session's refresh tokens carry (claim `sso`); signing out deletes it.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import models

LOGIN_TTL = timedelta(minutes=10)
TICKET_TTL = timedelta(seconds=60)


class Identity(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identities")
    issuer = models.CharField(max_length=500)
    subject = models.CharField(max_length=255)
    email = models.CharField(max_length=254, blank=True, default="", help_text="As the provider last gave it.")
    created_at = models.DateTimeField(auto_now_add=True)
    last_login_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="sso_identity_issuer_subject")]
        verbose_name_plural = "identities"

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"


class LoginAttempt(models.Model):
    state = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the state sent to the provider.")
    browser = models.CharField(max_length=64, help_text="SHA-256 of the browser's binding cookie.")
    nonce = models.CharField(max_length=128)
    code_verifier = models.CharField(max_length=128)
    redirect_uri = models.CharField(max_length=500)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    def __str__(self) -> str:
        return f"sign-in started {self.created_at:%Y-%m-%d %H:%M:%S}"


class SsoSession(models.Model):
    key = models.CharField(max_length=64, unique=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    issuer = models.CharField(max_length=500)
    id_token = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    def __str__(self) -> str:
        return f"sso session of {self.user_id}"


class Ticket(models.Model):
    hash = models.CharField(max_length=64, unique=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    session = models.ForeignKey(SsoSession, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    def __str__(self) -> str:
        return f"sign-in ticket of {self.user_id}"

"""JWT pairs bound to the password: a token carries a digest of the password hash, so changing the
password invalidates every token issued before it, access tokens included."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from rest_framework_simplejwt.tokens import RefreshToken

PASSWORD_CLAIM = "pwv"
# On the refresh tokens of a single sign-on session: the sso.models.SsoSession key, kept through every rotation,
# for the provider's sign-out.
SSO_CLAIM = "sso"


def password_version(user: AbstractBaseUser) -> str:
    # Django's session auth hash is an HMAC of the password hash under SECRET_KEY, which is persisted
    # in the data dir, so it is stable across restarts and changes exactly when the password does.
    return user.get_session_auth_hash()[:24]


def token_pair_for(user: AbstractBaseUser, *, sso: str | None = None) -> dict[str, str]:
    refresh = RefreshToken.for_user(user)
    refresh[PASSWORD_CLAIM] = password_version(user)
    if sso:
        refresh[SSO_CLAIM] = sso
    return {"token": str(refresh.access_token), "refresh": str(refresh)}

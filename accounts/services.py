"""Writes of accounts: registration, passwords, tokens, the initial admin, the config singleton."""

from __future__ import annotations

import logging
import os
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth import get_user_model, password_validation
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from rest_framework_simplejwt.exceptions import TokenError
from rest_framework_simplejwt.token_blacklist.models import BlacklistedToken, OutstandingToken
from rest_framework_simplejwt.tokens import RefreshToken

from accounts.models import AgentConfig, RevokedAccessToken
from accounts.tokens import PASSWORD_CLAIM, password_version, token_pair_for
from agentsite.core.datadir import write_private
from agentsite.core.errors import AppError

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

logger = logging.getLogger(__name__)
User = get_user_model()

INITIAL_ADMIN_FILE = "initial_admin.txt"
INITIAL_ADMIN_USERNAME = "admin"


def user_register(*, username: str, password: str) -> Any:
    """Create a user. Raises AppError 400 `invalid` (taken name, weak password)."""
    _check_password(password, User(username=username))
    try:
        with transaction.atomic():
            if User.objects.filter(username__iexact=username).exists():
                raise AppError("invalid", "That username is taken.", 400, {"username": ["That username is taken."]})
            return User.objects.create_user(username=username, password=password)
    except IntegrityError as exc:
        raise AppError("invalid", "That username is taken.", 400, {"username": ["That username is taken."]}) from exc


def _check_password(password: str, user: AbstractBaseUser) -> None:
    try:
        password_validation.validate_password(password, user)
    except DjangoValidationError as exc:
        raise AppError("invalid", f"password: {exc.messages[0]}", 400, {"password": list(exc.messages)}) from exc


@transaction.atomic
def user_password_change(*, user: AbstractBaseUser, old_password: str, new_password: str) -> dict[str, str]:
    """Set a new password and revoke every earlier token; returns a fresh token pair."""
    if not user.check_password(old_password):
        raise AppError("invalid", "The current password is wrong.", 400,
                       {"old_password": ["The current password is wrong."]})
    _check_password(new_password, user)
    user.set_password(new_password)
    user.save(update_fields=["password"])
    tokens_revoke_all(user=user)
    return token_pair_for(user)


def tokens_revoke_all(*, user: AbstractBaseUser) -> int:
    """Blacklist every outstanding refresh token of user; access tokens die with the password claim."""
    outstanding = OutstandingToken.objects.filter(user=user).exclude(blacklistedtoken__isnull=False)
    revoked = 0
    for token in outstanding:
        BlacklistedToken.objects.get_or_create(token=token)
        revoked += 1
    return revoked


def tokens_refresh(*, refresh: str) -> dict[str, str]:
    """Rotate a refresh token: the old one is blacklisted, a new pair returned. Raises 401 `token_invalid`."""
    try:
        old = RefreshToken(refresh)  # verifies signature, expiry and the blacklist
    except TokenError as exc:
        raise AppError("token_invalid", "The refresh token is invalid, expired or revoked.", 401) from exc
    user = User.objects.filter(pk=old.get(settings.SIMPLE_JWT["USER_ID_CLAIM"]), is_active=True).first()
    if user is None or old.get(PASSWORD_CLAIM) != password_version(user):
        raise AppError("token_invalid", "The refresh token is no longer valid; log in again.", 401)
    _blacklist_once(old)
    return token_pair_for(user)


def _blacklist_once(token: RefreshToken) -> None:
    """Blacklist a refresh token, or raise 401 if another request already did: one token, one rotation."""
    jti = token[settings.SIMPLE_JWT.get("JTI_CLAIM", "jti")]
    try:
        with transaction.atomic():
            # The row lock serialises concurrent rotations of the same token; the unique blacklist row
            # settles it even where the database does not lock (SQLite serialises writers anyway).
            outstanding = OutstandingToken.objects.select_for_update().filter(jti=jti).first()
            if outstanding is None:
                token.outstand()  # issued before the blacklist app knew it
                outstanding = OutstandingToken.objects.select_for_update().get(jti=jti)
            if BlacklistedToken.objects.filter(token=outstanding).exists():
                raise AppError("token_invalid", "The refresh token was already used.", 401)
            BlacklistedToken.objects.create(token=outstanding)
    except IntegrityError as exc:
        raise AppError("token_invalid", "The refresh token was already used.", 401) from exc


@transaction.atomic
def tokens_logout(*, user: AbstractBaseUser, refresh: str, access: Any) -> None:
    """Blacklist a refresh token of user and revoke the access token the call came with (`access`, validated).
    Raises 400 `invalid` for a refresh token that is not theirs or not valid; then nothing is revoked."""
    try:
        token = RefreshToken(refresh)
    except TokenError as exc:
        raise AppError("invalid", "The refresh token is invalid or already revoked.", 400,
                       {"refresh": ["Invalid or revoked."]}) from exc
    if str(token.get(settings.SIMPLE_JWT["USER_ID_CLAIM"])) != str(user.pk):
        raise AppError("invalid", "The refresh token belongs to another user.", 400, {"refresh": ["Not yours."]})
    token.blacklist()
    access_token_revoke(user=user, access=access)


def access_token_revoke(*, user: AbstractBaseUser, access: Any) -> None:
    """Revoke a validated access token of user until it expires, in every process once committed (the user
    is announced: each process's cache of the user holds its revoked tokens, accounts.authentication)."""
    from accounts.authentication import UserCache
    from agentsite.core import invalidation

    now = timezone.now()
    RevokedAccessToken.objects.filter(expires_at__lte=now).delete()  # dead anyway: the table stays small
    expires_at = datetime.fromtimestamp(int(access["exp"]), tz=UTC)
    RevokedAccessToken.objects.get_or_create(jti=str(access[settings.SIMPLE_JWT.get("JTI_CLAIM", "jti")]),
                                             defaults={"user": user, "expires_at": expires_at})
    # As for any change of a user (accounts.apps): dropped here at once, and everywhere once committed (a load
    # in between read the old rows, and is dropped again by the announcement).
    invalidation.drop_here(UserCache.TOPIC, user.pk)
    transaction.on_commit(lambda: invalidation.announce(UserCache.TOPIC, user.pk))


def admin_bootstrap(*, data_dir: Path | None = None) -> tuple[str, str] | None:
    """Create the initial administrator with a random password on first start.

    Returns (username, password) when created now; None when an administrator or the password file
    already exists (it is never recreated, so a deleted admin stays deleted).
    """
    directory = Path(data_dir or settings.DATA_DIR)
    marker = directory / INITIAL_ADMIN_FILE
    if marker.exists() or User.objects.filter(is_superuser=True).exists():
        return None
    password = secrets.token_urlsafe(18)
    with transaction.atomic():
        User.objects.create_superuser(username=INITIAL_ADMIN_USERNAME, password=password, email="")
    write_private(marker, f"username: {INITIAL_ADMIN_USERNAME}\npassword: {password}\n")
    return INITIAL_ADMIN_USERNAME, password


# --- config -----------------------------------------------------------------------------------------

CONFIG_FIELDS = (
    "provider", "base_url", "api_key", "model", "system_prompt", "temperature", "max_tokens", "tools",
    "kb_enabled", "kb_top_k", "kb_max_chars", "stt_provider", "tts_provider", "tts_voice",
    "allow_registration", "compat_auth",
)


def config_create_default() -> AgentConfig:
    """The first-run config: a provider key in the environment picks that provider."""
    defaults: dict[str, Any] = {}
    if os.environ.get("OPENAI_API_KEY"):
        defaults = {"provider": "openai", "api_key": os.environ["OPENAI_API_KEY"]}
    elif os.environ.get("ANTHROPIC_API_KEY"):
        defaults = {"provider": "anthropic", "api_key": os.environ["ANTHROPIC_API_KEY"]}
    config, _ = AgentConfig.objects.get_or_create(pk=1, defaults=defaults)
    return config


@transaction.atomic
def config_update(*, changes: dict[str, Any]) -> AgentConfig:
    """Apply validated changes to the singleton. Unknown fields must be rejected before this call."""
    config_create_default()
    config = AgentConfig.objects.select_for_update().get(pk=1)
    for name, value in changes.items():
        setattr(config, name, value)
    config.save()
    logger.info("Config updated: %s", ", ".join(sorted(changes)))  # names only: values may be secrets
    return config


# --- API keys (issue 27) ----------------------------------------------------------------------------

DEFAULT_KEY_SCOPES = ("v1",)
MAX_LIVE_KEYS = 100  # per user: keys neither revoked nor expired


def key_create(*, user: AbstractBaseUser, name: str, scopes: list[str] | None = None,
               expires_at: datetime | None = None, budget: dict | None = None) -> tuple[Any, str]:
    """Make an API key for `user` (the caller: a key is made for oneself); returns (key, secret). The secret,
    `ask-` + 43 URL-safe characters (256 random bits), exists only in this return value: the row keeps its
    SHA-256. `admin` is a scope only an admin gives, to their own key. Raises AppError 400 / 403 / 409."""
    from accounts.authentication import KEY_PREFIX, key_digest
    from accounts.models import ApiKey

    scopes = sorted(set(scopes if scopes is not None else DEFAULT_KEY_SCOPES), key=ApiKey.SCOPES.index)
    if not scopes:
        raise AppError("invalid", "scopes: give at least one scope.", 400, {"scopes": ["Give at least one scope."]})
    if "admin" in scopes and not user.is_staff:
        raise AppError("forbidden", "Only an administrator may give a key the admin scope (and only with a dashboard "
                       "token or a key that has it).", 403)
    if expires_at is not None and expires_at <= timezone.now():
        raise AppError("invalid", "expires_at: the date is in the past.", 400,
                       {"expires_at": ["The date is in the past."]})
    live = ApiKey.objects.filter(user=user, revoked=False).exclude(expires_at__lte=timezone.now()).count()
    if live >= MAX_LIVE_KEYS:
        raise AppError("conflict", f"You have {live} live API keys, the most allowed; revoke one first.", 409)
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey.objects.create(user=user, name=name, prefix=secret[:12], hash=key_digest(secret), scopes=scopes,
                                expires_at=expires_at, budget=budget, password_version=password_version(user))
    logger.info("API key %s (%s) made for user %s with scopes %s", key.pk, key.prefix, user.pk, ",".join(scopes))
    return key, secret


def key_update(*, key: Any, changes: dict[str, Any]) -> Any:
    """Rename a key or set its budget (the fields of `changes`: name, budget)."""
    for field in ("name", "budget"):
        if field in changes:
            setattr(key, field, changes[field])
    key.save(update_fields=[field for field in ("name", "budget") if field in changes] or None)
    return key


def key_revoke(*, key: Any) -> Any:
    """Revoke a key: it stops at once in every process (the save is announced: accounts.authentication).
    Revoking a revoked key changes nothing."""
    if not key.revoked:
        key.revoked, key.revoked_at = True, timezone.now()
        key.save(update_fields=["revoked", "revoked_at"])
        logger.info("API key %s (%s) of user %s revoked", key.pk, key.prefix, key.user_id)
    return key

"""Writes of accounts: registration, passwords, tokens, the initial admin, API keys."""

from __future__ import annotations

import logging
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.conf import settings
from django.contrib.auth import get_user_model, password_validation
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from rest_framework_simplejwt.backends import TokenBackend
from rest_framework_simplejwt.exceptions import TokenError
from rest_framework_simplejwt.token_blacklist.models import BlacklistedToken, OutstandingToken
from rest_framework_simplejwt.tokens import RefreshToken

from accounts.authentication import KEY_PREFIX, UserCache, key_digest
from accounts.models import ApiKey, BreakGlass, RevokedAccessToken
from accounts.tokens import PASSWORD_CLAIM, SSO_CLAIM, password_version, token_pair_for
from agentsite.core import invalidation
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
    if old.get(SSO_CLAIM) and not _sso_session_alive(str(old[SSO_CLAIM])):
        raise AppError("token_invalid", "The single sign-on session ended (signed out, or signed in longer ago "
                       "than the refresh lifetime): sign in again.", 401)
    _blacklist_once(old)
    return token_pair_for(user, sso=old.get(SSO_CLAIM))


def _sso_session_alive(key: str) -> bool:
    """Whether the single sign-on session a refresh token names (claim `sso`) is still there and younger than
    the refresh lifetime: a session's tokens rotate, but never past its sign-in's lifetime, so what the provider
    changed (a user disabled, moved out of the admin or allowed groups) reaches agentsite at the next sign-in."""
    session_model = apps.get_model("sso", "SsoSession")  # sso builds on accounts: no import of it here
    since = timezone.now() - settings.SIMPLE_JWT["REFRESH_TOKEN_LIFETIME"]
    return session_model.objects.filter(key=key, created_at__gte=since).exists()


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
                raise AppError("token_invalid", REFRESH_REUSED, 401)
            BlacklistedToken.objects.create(token=outstanding)
    except IntegrityError as exc:
        raise AppError("token_invalid", REFRESH_REUSED, 401) from exc


REFRESH_REUSED = "The refresh token was already used."


def refresh_reused(refresh: str) -> Any:
    """The user of a refresh token that was already rotated or revoked (its signature holds and its jti is
    blacklisted): a replay, for the audit log. None for any other token."""
    try:
        payload = TokenBackend(settings.SIMPLE_JWT["ALGORITHM"], settings.SIMPLE_JWT["SIGNING_KEY"]).decode(
            refresh, verify=True)
    except Exception:  # a boundary: an unreadable token names nobody
        return None
    if not BlacklistedToken.objects.filter(token__jti=payload.get("jti")).exists():
        return None
    return User.objects.filter(pk=payload.get(settings.SIMPLE_JWT["USER_ID_CLAIM"])).first()


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
    """Create the initial administrator with a random password on first start, flagged break-glass: it is the
    operator's account, its password is in the data directory, and with it a broken identity provider cannot
    lock the operator out of a server that runs with AGENTSITE_PASSWORD_LOGIN=0 from its first start
    (`manage.py breakglass admin --remove` takes the flag away).

    Returns (username, password) when created now; None when an administrator or the password file
    already exists (it is never recreated, so a deleted admin stays deleted).
    """
    directory = Path(data_dir or settings.DATA_DIR)
    marker = directory / INITIAL_ADMIN_FILE
    if marker.exists() or User.objects.filter(is_superuser=True).exists():
        return None
    password = secrets.token_urlsafe(18)
    with transaction.atomic():
        admin = User.objects.create_superuser(username=INITIAL_ADMIN_USERNAME, password=password, email="")
        BreakGlass.objects.create(user=admin)
    write_private(marker, f"username: {INITIAL_ADMIN_USERNAME}\npassword: {password}\n")
    return INITIAL_ADMIN_USERNAME, password


# --- API keys ----------------------------------------------------------------------------

DEFAULT_KEY_SCOPES = ("v1",)
MAX_LIVE_KEYS = 100  # per user: keys neither revoked nor expired


def key_create(*, user: AbstractBaseUser, name: str, scopes: list[str] | None = None,
               expires_at: datetime | None = None, budget: dict | None = None,
               parent: Any = None) -> tuple[Any, str]:
    """Make an API key for `user` (the caller: a key is made for oneself); returns (key, secret). The secret,
    `ask-` + 43 URL-safe characters (256 random bits), exists only in this return value: the row keeps its
    SHA-256. `admin` is a scope only an admin gives, to their own key. `parent`: the key the request was made
    with, which the new key may not exceed (`key_within`). Raises AppError 400 / 401 / 403 / 409."""
    scopes = sorted(set(scopes if scopes is not None else DEFAULT_KEY_SCOPES), key=ApiKey.SCOPES.index)
    if not scopes:
        raise AppError("invalid", "scopes: give at least one scope.", 400, {"scopes": ["Give at least one scope."]})
    if "admin" in scopes and not user.is_staff:
        raise AppError("forbidden", "Only an administrator may give a key the admin scope (and only with a dashboard "
                       "token or a key that has it).", 403)
    if expires_at is not None and expires_at <= timezone.now():
        raise AppError("invalid", "expires_at: the date is in the past.", 400,
                       {"expires_at": ["The date is in the past."]})
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        if parent is not None:
            key_within(parent=_key_now(parent.pk), scopes=scopes, budget=budget, expires_at=expires_at)
        live = ApiKey.objects.filter(user=user, revoked=False).exclude(expires_at__lte=timezone.now()).count()
        if live >= MAX_LIVE_KEYS:
            raise AppError("conflict", f"You have {live} live API keys, the most allowed; revoke one first.", 409)
        key = ApiKey.objects.create(user=user, name=name, prefix=secret[:12], hash=key_digest(secret),
                                    scopes=scopes, expires_at=expires_at, budget=budget,
                                    password_version=password_version(user),
                                    created_by_key_id=None if parent is None else parent.pk)
    if parent is not None and ApiKey.objects.filter(pk=parent.pk, revoked=True).exists():
        # The parent was revoked while this key was being made, after the revocation had swept its tree: the
        # child is committed first and the parent read after, so one of the two always sees the other.
        key_revoke(key=key)
        raise _revoked_parent()
    logger.info("API key %s (%s) made for user %s with scopes %s", key.pk, key.prefix, user.pk, ",".join(scopes))
    return key, secret


def _key_now(key_id: int) -> Any:
    """The key's row as committed now, locked for this transaction (a revocation of it waits, or went first)."""
    row = ApiKey.objects.select_for_update().filter(pk=key_id).first()
    if row is None or row.revoked:
        raise _revoked_parent()
    return row


def _revoked_parent() -> AppError:
    return AppError("token_invalid", "The API key was revoked.", 401,
                    headers={"WWW-Authenticate": 'Bearer realm="api"'})


def budget_looser(*, budget: dict | None, than: dict | None) -> list[str]:
    """The limits of `than` that `budget` loosens: set there, and above it or missing (no limit) here."""
    looser = []
    for name, limit in (than or {}).items():
        if limit is None:
            continue
        mine = (budget or {}).get(name)
        if mine is None or mine > limit:
            looser.append(name)
    return sorted(looser)


def key_within(*, parent: Any, scopes: list[str], budget: dict | None, expires_at: datetime | None) -> None:
    """Raises 403 `forbidden` (details naming the field) unless a key with these scopes, budget and expiry is
    no more than `parent`: its scopes a subset, each budget limit at most the parent's (a limit the parent has
    and the key lacks is looser), its expiry no later (none is later than any)."""
    extra = [scope for scope in scopes if scope not in parent.scopes]
    if extra:
        raise AppError("forbidden", f"scopes: a key may not give a scope it lacks ({', '.join(extra)}).", 403,
                       {"scopes": [f"Not among this key's scopes: {', '.join(extra)}."]})
    looser = budget_looser(budget=budget, than=parent.budget)
    if looser:
        raise AppError("forbidden", f"budget: a key may not give a budget looser than its own ({', '.join(looser)} "
                       "missing or above this key's).", 403,
                       {"budget": [f"At most this key's {name}: {parent.budget[name]}." for name in looser]})
    if parent.expires_at is not None and (expires_at is None or expires_at > parent.expires_at):
        raise AppError("forbidden", "expires_at: a key may not outlive the key that makes it.", 403,
                       {"expires_at": [f"At most this key's expiry, {parent.expires_at.isoformat()}."]})


def key_update(*, key: Any, changes: dict[str, Any], acting_key: Any = None) -> Any:
    """Rename a key or set its budget (the fields of `changes`: name, budget). `acting_key`: the key the request
    was made with, which may set the budget only of keys it made (down its tree), no looser than its own;
    never its own (403 `forbidden`). Another user's key (an admin's operation) is not bound by it."""
    if "budget" in changes and acting_key is not None and key.user_id == acting_key.user_id:
        with transaction.atomic():
            if key.pk == acting_key.pk:
                raise AppError("forbidden", "A key may not change its own budget.", 403,
                               {"budget": ["Not with this key."]})
            if not key_descends(key_id=key.pk, ancestor_id=acting_key.pk):
                raise AppError("forbidden", "A key may change the budget only of keys it made.", 403,
                               {"budget": ["Not a key this key made."]})
            key_within(parent=_key_now(acting_key.pk), scopes=list(key.scopes), budget=changes["budget"],
                       expires_at=key.expires_at)
            return _key_changed(key, changes)
    return _key_changed(key, changes)


def _key_changed(key: Any, changes: dict[str, Any]) -> Any:
    for field in ("name", "budget"):
        if field in changes:
            setattr(key, field, changes[field])
    key.save(update_fields=[field for field in ("name", "budget") if field in changes] or None)
    return key


def key_descends(*, key_id: int, ancestor_id: int) -> bool:
    """Whether the key was made, directly or down the tree, by the key `ancestor_id`."""
    seen: set[int] = set()
    current = ApiKey.objects.filter(pk=key_id).values_list("created_by_key_id", flat=True).first()
    while current is not None and current not in seen:
        if current == ancestor_id:
            return True
        seen.add(current)
        current = ApiKey.objects.filter(pk=current).values_list("created_by_key_id", flat=True).first()
    return False


@transaction.atomic
def key_revoke(*, key: Any) -> int:
    """Revoke a key and every key made below it (by it, by those, ...), in one transaction: each stops at once
    in every process (each save is announced: accounts.authentication). Revoking a revoked key revokes only
    what below it still stands. Returns how many keys below it were revoked."""
    _key_revoked(key)
    below, frontier = 0, [key.pk]
    while frontier:
        children = list(ApiKey.objects.select_for_update().filter(created_by_key_id__in=frontier))
        below += sum(_key_revoked(child) for child in children)
        frontier = [child.pk for child in children]
    return below


def _key_revoked(key: Any) -> bool:
    if key.revoked:
        return False
    key.revoked, key.revoked_at = True, timezone.now()
    key.save(update_fields=["revoked", "revoked_at"])
    logger.info("API key %s (%s) of user %s revoked", key.pk, key.prefix, key.user_id)
    return True

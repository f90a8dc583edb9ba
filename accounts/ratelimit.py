"""Rate limits per client IP: login attempts a minute, registrations an hour; password changes a minute per
user and per client IP (the login's limit: each wrong old password costs a password hash, as a login does).

Each limit is a fixed window counted in the Django cache (shared between processes via Redis): the window
starts with the first event from an address and lasts window_s; past `limit` events in it, 429
`rate_limited` with Retry-After (the seconds until the window ends).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest

from agentsite.core.errors import AppError

REGISTER_RATE_WINDOW_S = 3600


def client_ip(request: HttpRequest) -> str:
    """The client's address; X-Forwarded-For only counts behind the number of proxies the operator set."""
    remote = request.META.get("REMOTE_ADDR") or "unknown"
    proxies = settings.TRUSTED_PROXY_COUNT
    if proxies <= 0:
        return remote
    forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]
    if not forwarded:
        return remote
    # Each trusted proxy appends the address it saw; the client is the one the outermost trusted proxy saw.
    return forwarded[-proxies] if len(forwarded) >= proxies else forwarded[0]


def login_attempt_check(*, ip: str) -> None:
    """Count one login attempt from ip; raise 429 `rate_limited` past the limit for the window."""
    _count(scope="login", ip=ip, limit=settings.LOGIN_RATE_LIMIT, window=settings.LOGIN_RATE_WINDOW_S,
           what="login attempts")


def password_change_attempt_check(*, ip: str, user_id: object) -> None:
    """Count one password-change attempt for the user and for the client address; raise 429 `rate_limited` past
    the login limit for the window in either (a right password too: the attempt is counted before it is
    checked, so that a guesser learns nothing while limited)."""
    for who in (f"user:{user_id}", f"ip:{ip}"):
        _count(scope="password", ip=who, limit=settings.LOGIN_RATE_LIMIT, window=settings.LOGIN_RATE_WINDOW_S,
               what="password change attempts")


@contextmanager
def registration_slot(*, ip: str) -> Iterator[None]:
    """Count one registration from ip in its hour; raise 429 `rate_limited` past AGENTSITE_REGISTER_RATE_LIMIT.

    Only accounts made count: a registration that fails inside the block (a taken name, a weak password)
    gives its slot back, so that a person correcting a form is not locked out for an hour.
    """
    _count(scope="register", ip=ip, limit=settings.REGISTER_RATE_LIMIT, window=REGISTER_RATE_WINDOW_S,
           what="accounts registered from your address")
    try:
        yield
    except BaseException:
        _uncount(scope="register", ip=ip)
        raise


def _count(*, scope: str, ip: str, limit: int, window: int, what: str) -> None:
    count_key, start_key = f"{scope}-attempts:{ip}", f"{scope}-window:{ip}"
    now = time.time()
    cache.add(start_key, now, timeout=window)
    if cache.add(count_key, 1, timeout=window):
        count = 1
    else:
        try:
            count = cache.incr(count_key)
        except ValueError:  # expired between add and incr: a new window
            cache.set(start_key, now, timeout=window)
            cache.set(count_key, 1, timeout=window)
            count = 1
    if count > limit:
        started = cache.get(start_key) or now
        retry_after = max(1, int(window - (now - float(started))) + 1)
        raise AppError("rate_limited", f"Too many {what}; try again in {retry_after} seconds.", 429,
                       {"retry_after": retry_after}, headers={"Retry-After": str(retry_after)})


def _uncount(*, scope: str, ip: str) -> None:
    try:
        cache.decr(f"{scope}-attempts:{ip}")
    except ValueError:  # the window ended meanwhile: nothing left to give back
        pass


def oidc_login_check(*, ip: str, limit: int) -> None:
    """Count one single sign-on started from ip; raise 429 `rate_limited` past `limit` in the minute."""
    _count(scope="oidc-login", ip=ip, limit=limit, window=60, what="sign-ins started from your address")


def oauth_register_check(*, ip: str, limit: int) -> None:
    """Count one OAuth client registration from ip; raise 429 `rate_limited` past `limit` in the minute."""
    _count(scope="oauth-register", ip=ip, limit=limit, window=60, what="OAuth clients registered from your address")


def oauth_authorize_check(*, ip: str, limit: int) -> None:
    """Count one OAuth authorization request from ip (each keeps a consent row); 429 `rate_limited` past `limit` in
    the minute."""
    _count(scope="oauth-authorize", ip=ip, limit=limit, window=60, what="authorization requests from your address")

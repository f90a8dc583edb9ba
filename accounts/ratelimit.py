"""Login rate limit: attempts per client IP in a window, counted in the Django cache (shared via Redis)."""

from __future__ import annotations

import time

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest

from agentsite.errors import AppError


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
    window = settings.LOGIN_RATE_WINDOW_S
    limit = settings.LOGIN_RATE_LIMIT
    count_key = f"login-attempts:{ip}"
    start_key = f"login-window:{ip}"
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
        raise AppError("rate_limited", f"Too many login attempts; try again in {retry_after} seconds.", 429,
                       {"retry_after": retry_after}, headers={"Retry-After": str(retry_after)})

"""Reads of accounts and the config singleton."""

from __future__ import annotations

import threading
import time

from accounts.models import AgentConfig

# The config is read on every chat turn; a per-process copy avoids a query each time. A save in this
# process drops it at once; other processes (the q2 workers) pick a change up within CONFIG_TTL_S.
CONFIG_TTL_S = 2.0
_cache: dict[str, object] = {}
_lock = threading.Lock()


def config_get() -> AgentConfig:
    """The config singleton, created with first-run defaults when missing."""
    with _lock:
        cached = _cache.get("config")
        if cached is not None and time.monotonic() - _cache["at"] < CONFIG_TTL_S:
            return cached  # type: ignore[return-value]
    config = AgentConfig.objects.filter(pk=1).first()
    if config is None:
        from accounts.services import config_create_default

        config = config_create_default()
    with _lock:
        _cache["config"] = config
        _cache["at"] = time.monotonic()
    return config


def config_cache_clear() -> None:
    with _lock:
        _cache.clear()

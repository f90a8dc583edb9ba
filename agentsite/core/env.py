"""Typed readers for environment variables; a malformed value names the variable."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar
from urllib.parse import parse_qs, urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

Number = TypeVar("Number", int, float)

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be one of 1/0, true/false, yes/no, on/off (got {raw!r}).")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    return _env_number(name, default, int, "a whole number", minimum)


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    return _env_number(name, default, float, "a number", minimum)


def _env_number(name: str, default: Number, parse: Callable[[str], Number], kind: str,
                minimum: Number | None) -> Number:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = parse(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be {kind} (got {raw!r}).") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum} (got {value}).")
    return value


def env_whole_minutes_s(name: str, default: int) -> int:
    """A period in seconds that is a whole number of minutes (60, 120, ...): what django-q2's minutes
    schedules can run."""
    value = env_int(name, default, minimum=60)
    if value % 60:
        raise ImproperlyConfigured(f"{name} must be a whole number of minutes in seconds: 60, 120, ... "
                                   f"(got {value}).")
    return value


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return list(default or [])
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_redis_url(name: str) -> str:
    """A redis://, rediss:// or unix:// URL (redis-py's schemes), checked now: a bad one would otherwise
    surface as a redis-py traceback on the first cache or queue call, after the server is up."""
    url = env_str(name).strip()
    if url:
        problem = _redis_url_problem(url)
        if problem:
            raise ImproperlyConfigured(f"{name} {problem}, e.g. redis://127.0.0.1:6379/0.")
    return url


def _redis_url_problem(url: str) -> str | None:
    parsed = urlsplit(url)
    if parsed.scheme not in {"redis", "rediss", "unix"}:
        return f"must start with redis://, rediss:// or unix:// (got {parsed.scheme or 'no'} scheme)"
    if parsed.scheme == "unix":
        return None if parsed.path else "must name a socket path (unix:///path/to/redis.sock)"
    try:
        port = parsed.port
    except ValueError:
        return "has a port that is not a number from 1 to 65535"
    if not parsed.hostname:
        return "must name a host"
    if port == 0:
        return "has a port that is not a number from 1 to 65535"
    db = parsed.path.strip("/") or parse_qs(parsed.query).get("db", ["0"])[-1]
    if not db.isdigit():
        return f"must end with a database number (got {db!r})"
    return None


# Schemes Django can serve here: psycopg is a dependency, SQLite is built in.
_POSTGRES_SCHEMES = {"postgres", "postgresql", "pgsql"}


def database_from_url(url: str, *, name: str = "DATABASE_URL") -> dict:
    """Translate a postgres:// or sqlite:/// URL (parsed by dj-database-url) into a Django DATABASES entry."""
    scheme = urlsplit(url).scheme
    if scheme not in _POSTGRES_SCHEMES | {"sqlite"}:
        raise ImproperlyConfigured(f"{name} must start with postgres://, postgresql:// or sqlite:/// (got {scheme!r}).")
    try:
        # Persistent connections (checked before reuse): request threads are reused
        # (agentsite/server/requestthreads.py).
        parsed = dj_database_url.parse(url, conn_max_age=None, conn_health_checks=True)
    except ValueError as exc:  # a bad port, bad quoting: its message does not repeat the URL (or its password)
        raise ImproperlyConfigured(f"{name} is not a valid database URL: {exc}") from exc
    if scheme == "sqlite":
        if parsed["NAME"] in ("", ":memory:"):
            raise ImproperlyConfigured(f"{name} must name a database file, e.g. sqlite:////var/lib/agentsite/db.sqlite3.")
        return sqlite_database(parsed["NAME"])
    options = parsed.get("OPTIONS", {})
    # A database that does not answer fails the health check in 5 s instead of hanging the request.
    return {**parsed, "NAME": parsed["NAME"] or "postgres", "PORT": str(parsed["PORT"] or ""),
            "OPTIONS": {"connect_timeout": 5, **options}}


def sqlite_database(path: str) -> dict:
    return {
        # Django's backend, creating the data directory on first connect (the settings write nothing).
        "ENGINE": "agentsite.core.db.sqlite3",
        "NAME": path,
        # WAL lets the q2 worker and the web process read while one writes; IMMEDIATE takes the write
        # lock at BEGIN, so two writers wait on busy_timeout instead of failing with "database is locked".
        "OPTIONS": {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=10000;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 10,
        },
        # A connection is kept by the thread that opened it: request threads are reused (requestthreads.py).
        "CONN_MAX_AGE": None,
        # A file, not :memory:, so that end-to-end tests can open the test database from another process.
        "TEST": {"NAME": f"{path}.test"},
    }
